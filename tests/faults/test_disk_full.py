"""Disk full: the database on a small tmpfs (made with bubblewrap's ``--size``, so no root
mount privileges are needed) fills up in the middle of a job.

The run ends with one clear line naming the problem and no traceback; afterwards (with space
again) the database opens, verifies, lists its threads, and the job resumes to the end. Where
bubblewrap cannot make the tmpfs, the test is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workers.tools import sandbox_status

BIG = "head -c 120000 /dev/zero | tr '\\\\0' x; echo"


def _job(root: Path, db_dir: Path) -> Path:
    ws = root / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    turns = [{"tool_calls": [{"name": "bash", "input": {"command": BIG}}]} for _ in range(40)]
    turns.append(
        {"tool_calls": [{"name": "submit_result", "input": {"status": "done", "summary": "ok"}}]}
    )
    script = {
        "rules": [
            {"match": "Job: full", "turns": [{"text": "done"}]},
            {"match": "(?m)^Task a:", "turns": turns},
        ]
    }
    (root / "full.json").write_text(json.dumps(script))
    path = root / "full.toml"
    path.write_text(
        '[job]\nname = "full"\ngoal = "fill the disk"\nworkspace = "ws"\n'
        f'model = "scripted:{root / "full.json"}"\nsandbox = "none"\n'
        "[job.worker]\nmax_turns = 100\n"
        '[[task]]\nid = "a"\ntitle = "A"\nprompt = "go"\n'
    )
    return path


def _can_size_a_tmpfs() -> bool:
    status = sandbox_status()
    if not status.available:
        return False
    usage = subprocess.run([status.program, "--help"], capture_output=True, text=True, check=False)
    return "--size" in usage.stdout + usage.stderr  # bubblewrap 0.7+


@pytest.mark.skipif(not _can_size_a_tmpfs(), reason="bubblewrap cannot make a small tmpfs here")
def test_a_full_disk_mid_job_is_a_clear_error_and_the_database_still_verifies(
    tmp_path: Path,
) -> None:
    small = tmp_path / "small"
    small.mkdir()
    job = _job(tmp_path, small)
    db = small / "threads.db"
    report = tmp_path / "report.json"
    # everything that needs the small disk happens inside one bwrap: the tmpfs dies with it
    check = f"""
import json, sqlite3, subprocess, sys, os
db = {str(db)!r}
cli = [sys.executable, "-m", "orchestrator", "--db", db]
run = subprocess.run(cli + ["run", {str(job)!r}], capture_output=True, text=True)
# space again: what a user does after freeing the disk
for name in os.listdir({str(small)!r}):
    if name == "filler":
        os.remove(os.path.join({str(small)!r}, name))
con = sqlite3.connect(db)
ok = con.execute("PRAGMA integrity_check").fetchone()[0]
con.close()
ls = subprocess.run(cli + ["--json", "ls"], capture_output=True, text=True)
lead = [t["ref"] for t in json.loads(ls.stdout or "[]") if t["kind"] == "lead"]
res = None
if lead:
    res = subprocess.run(cli + ["--json", "resume", lead[0]], capture_output=True, text=True)
con = sqlite3.connect(db)
ok2 = con.execute("PRAGMA integrity_check").fetchone()[0]
con.close()
json.dump({{"code": run.returncode, "stderr": run.stderr, "integrity": ok, "ls": ls.returncode,
           "lead": lead, "resume": None if res is None else [res.returncode, res.stderr[-2000:]],
           "integrity_after": ok2}}, open({str(report)!r}, "w"))
"""
    argv = [
        sandbox_status().program,
        "--bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--size", str(700 * 1024),
        "--tmpfs", str(small),
        "--die-with-parent",
        "--", sys.executable, "-c", check,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(report.read_text())
    # the worker that hit the full disk ends failed, said in one line (no traceback); the lead
    # may still write its report (its writes are small), so the run's code is 0 or 1
    assert out["code"] in (0, 1), out
    assert "Traceback" not in out["stderr"], out["stderr"]
    assert "database or disk is full" in out["stderr"], out["stderr"]
    assert out["integrity"] == "ok"
    assert out["ls"] == 0 and out["lead"], out
    assert out["integrity_after"] == "ok"
    # resumed with space again, the job ends: done, or failed on its max_turns — never stuck
    assert out["resume"][0] in (0, 1), out["resume"]
    assert "Traceback" not in out["resume"][1]
