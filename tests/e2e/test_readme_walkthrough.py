"""README's Walkthrough works as written (issue 23 item 2): its commands, read from README.md
itself, run one by one through a shell and the real ``threadloom`` command on the demo's
database, with the demo's refs in ``$LEAD`` and ``$WORKER`` as README says. Each exits 0 and
says what README says it does; the demo's own "next" lines are the same commands."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from store import Kind, Store

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's, where the ``threadloom`` script is


def walkthrough() -> list[str]:
    """The command lines of README's Walkthrough block, comments left out."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Walkthrough\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    # a comment is "#" after blanks, as the shell reads it: ``$WORKER#3`` is one word
    lines = [re.sub(r"\s+#(\s.*)?$", "", line).strip() for line in block.splitlines()]
    return [line for line in lines if line]


async def _refs(db: Path) -> tuple[str, str]:
    """The demo's lead and its tokenizer worker, read from the database."""
    store = await Store.open(str(db))
    try:
        (lead,) = await store.list_threads(kind=Kind.LEAD)
        workers = await store.children(lead.id)
        (worker,) = [w for w in workers if (w.task or {}).get("id") == "tokenizer"]
        return lead.ref, worker.ref
    finally:
        await store.close()


def _shell(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_walkthrough_command_runs_as_written_on_the_demos_database(tmp_path: Path) -> None:
    lines = walkthrough()
    assert lines[0].startswith("threadloom demo --keep /tmp/calc")
    assert any(line.startswith("threadloom fork $WORKER#5 ") for line in lines)
    assert any(line.startswith("threadloom resume $WORKER ") for line in lines)
    assert any(line.startswith("threadloom ask $WORKER ") for line in lines)
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADLOOM_")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", COLUMNS="100")
    sample = tmp_path / "calc"
    # the one change to README's text: the sample goes to this test's own directory
    demo = _shell(lines[0].replace("/tmp/calc", shlex.quote(str(sample))), tmp_path, env)
    assert demo.returncode == 0, demo.stderr[-3000:]
    lead, worker = asyncio.run(_refs(tmp_path / ".threadloom" / "threads.db"))
    env.update(LEAD=lead, WORKER=worker)

    # the demo ends with README's commands, its refs filled in
    printed = demo.stdout.split(f"its tokenizer worker {worker}):\n", 1)[1].splitlines()
    expected = [line.replace("$LEAD", lead).replace("$WORKER", worker) for line in lines[1:]]
    assert [p.strip() for p in printed if p.strip()] == expected

    ran: dict[str, subprocess.CompletedProcess[str]] = {}
    for line in lines[1:]:
        got = _shell(line, tmp_path, env)
        assert got.returncode == 0, f"{line}\n{got.stdout[-2000:]}\n{got.stderr[-2000:]}"
        assert "error" not in got.stderr.lower(), f"{line}\n{got.stderr}"
        ran[line.split('"')[0].strip()] = got

    tree = ran["threadloom tree $LEAD"].stdout
    assert tree.startswith(f"{lead}  lead  done") and worker in tree
    assert ran["threadloom show $WORKER#3"].stdout.count("\n#3 user") == 1
    assert "← bash · exit 1 " in ran["threadloom show $WORKER#3"].stdout  # the failing run
    assert "Root cause" in ran["threadloom show $WORKER --tools"].stdout
    assert "ZeroDivisionError" in ran["threadloom search"].stdout
    answer = ran["threadloom ask $WORKER"].stdout
    assert f"citations: {worker}#3" in answer and "[not found]" not in answer
    forked = ran["threadloom fork $WORKER#5"].stdout
    assert re.search(r"^done: T-[0-9a-z]{26}  \(job " + re.escape(lead), forked, re.M), forked
    assert "Not fixable in the parser" in forked
    resumed = ran["threadloom resume $WORKER"].stdout
    assert f"done: {worker}  (job {lead})" in resumed
    assert (sample / "tests" / "test_regression.py").is_file()

    # after them all, the job holds every thread the commands made, and stats counts them all
    listed = json.loads(_shell("threadloom --json ls", tmp_path, env).stdout)
    kinds = sorted(t["kind"] for t in listed)
    assert kinds == ["lead", "reader", "worker", "worker", "worker", "worker"]
    stats = ran["threadloom stats"].stdout.splitlines()
    assert stats[1].split()[:2] == [lead, "6"]
