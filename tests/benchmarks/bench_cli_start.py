"""How fast ``threadloom ls``, ``show``, ``search`` and ``tree`` answer, as a user runs them:
a new process each time, wall clock from spawn to exit.

    .venv/bin/python tests/benchmarks/bench_cli_start.py [--quick] [--rounds N]

On a database of realistic size (200 threads in 10 jobs, 20,000 messages, a fork, usage rows),
each command is timed three ways, interleaved round robin so that other load on the machine
weighs on all three alike, and reported as medians:

- ``fast``: the command as shipped (the read-only fast path, ``orchestrator.cli._fast``);
- ``slow``: the same command with ``THREADLOOM_NO_FAST=1`` (SQLAlchemy, pydantic, structlog);
- ``baseline``: ``python -c "import sqlite3; <the same queries>"`` — the floor for a Python
  process that answers the question at all;
- ``secret``: the fast command with API keys and a database password in its environment, which
  it takes out at start (``workers._secrets``): ``secret_over_fast`` is what that costs.

Prints one JSON document on stdout (progress on stderr) with the ratios fast/baseline and
slow/fast and the goal (fast ≤ 150 ms on a quiet machine). Nothing here asserts on time; the
load average is reported so a reader can tell a quiet run from a busy one. ``--importtime``
adds the top entries of ``python -X importtime`` for the fast ``ls``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from store import (
    NewMessage,
    Status,
    Store,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageRecord as Record,
)

GOAL_MS = 150.0
JOBS = 10
THREADS_PER_JOB = 20
MESSAGES_PER_THREAD = 100


async def build(path: Path, *, jobs: int, per_job: int, per_thread: int) -> dict[str, str]:
    """The database; returns the refs the commands read."""
    store = await Store.open(str(path), synchronous="OFF")
    try:
        first_lead = first_worker = ""
        for j in range(jobs):
            lead = await store.create_thread(
                kind="lead", title=f"job {j}: fix the parser", messages=[NewMessage.user("go")]
            )
            first_lead = first_lead or lead.id
            for w in range(per_job - 1):
                worker = await store.create_thread(
                    kind="worker", title=f"task {j}.{w}: tokenizer bound", parent_id=lead.id
                )
                first_worker = first_worker or worker.id
                msgs = [NewMessage.user(f"Fix test {w} of job {j}: the tokenizer fails")]
                for k in range((per_thread - 2) // 2):
                    msgs.append(
                        NewMessage(
                            role="assistant",
                            content=[
                                TextBlock(text=f"Step {k}: reading calc/tokenizer.py"),
                                ToolUseBlock(id=f"t{k}", name="bash", input={"command": "pytest"}),
                            ],
                        )
                    )
                    msgs.append(
                        NewMessage(
                            role="user",
                            content=[
                                ToolResultBlock(
                                    tool_use_id=f"t{k}",
                                    content=f"{k} passed, 1 failed: off-by-one in _scan_number\n"
                                    * 5,
                                )
                            ],
                        )
                    )
                msgs.append(NewMessage.assistant(f"Done: the bound was off by one ({j}.{w})."))
                await store.append(
                    worker.id,
                    msgs,
                    usage=Record(
                        model="m", usage=Usage(input_tokens=900, output_tokens=90), cost_usd=0.01
                    ),
                )
                await store.set_status(worker.id, Status.RUNNING)
                await store.set_status(worker.id, Status.DONE)
        await store.fork(first_worker, at=3, messages=[NewMessage.user("try another fix")])
        return {"lead": f"T-{first_lead}", "worker": f"T-{first_worker}"}
    finally:
        await store.close()


def _baselines(db: Path, refs: dict[str, str]) -> dict[str, str]:
    """For each command, a ``python -c`` program running the same queries with sqlite3."""
    open_ = f"import sqlite3; c = sqlite3.connect('file:{db}?mode=ro', uri=True)"
    worker, lead = refs["worker"][2:], refs["lead"][2:]
    return {
        "ls": f"{open_}; rows = c.execute('SELECT * FROM threads ORDER BY id DESC LIMIT 51')"
        ".fetchall(); print(len(rows))",
        "show": f"{open_}; t = c.execute('SELECT * FROM threads WHERE id = ?', ('{worker}',))"
        ".fetchone(); m = c.execute('SELECT * FROM messages WHERE thread_id = ? ORDER BY seq',"
        f" ('{worker}',)).fetchall(); u = c.execute('SELECT sum(input_tokens) FROM usage"
        f" WHERE thread_id = ?', ('{worker}',)).fetchall(); print(len(m))",
        "search": f'{open_}; h = c.execute("SELECT thread_id, seq, snippet(messages_fts, 0,'
        " '[', ']', '…', 16) FROM messages_fts WHERE messages_fts MATCH '\\\"off\\\" \\\"by\\\"'"
        ' ORDER BY rank LIMIT 20").fetchall(); print(len(h))',
        "tree": f"{open_}; t = c.execute('SELECT * FROM threads WHERE job_id = ? ORDER BY id',"
        f" ('{lead}',)).fetchall(); u = c.execute('SELECT thread_id, sum(input_tokens) FROM"
        " usage JOIN threads ON threads.id = usage.thread_id WHERE threads.job_id = ? GROUP BY"
        f" usage.thread_id', ('{lead}',)).fetchall(); print(len(t))",
    }


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, check=False)
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed: {proc.stderr.decode()[-500:]}")
    return elapsed


def _importtime(cmd: list[str], env: dict[str, str], top: int = 15) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *cmd[1:]], env=env, capture_output=True, text=True
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append(
            {
                "module": name.strip(),
                "self_ms": int(self_us) / 1000,
                "cumulative_ms": int(cumulative) / 1000,
            }
        )
    rows.sort(key=lambda r: r["self_ms"], reverse=True)
    return rows[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller database, fewer rounds")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--importtime", action="store_true")
    opts = ap.parse_args()
    jobs, per_thread = (3, 40) if opts.quick else (JOBS, MESSAGES_PER_THREAD)
    rounds = opts.rounds or (5 if opts.quick else 15)
    with tempfile.TemporaryDirectory(prefix="bench-cli-start-") as tmp:
        db = Path(tmp) / "threads.db"
        print(f"building {jobs * THREADS_PER_JOB} threads…", file=sys.stderr)
        refs = asyncio.run(build(db, jobs=jobs, per_job=THREADS_PER_JOB, per_thread=per_thread))
        env = {k: v for k, v in os.environ.items() if not k.startswith("THREADLOOM_")}
        slow_env = {**env, "THREADLOOM_NO_FAST": "1"}
        secret_env = {
            **env,
            "ANTHROPIC_API_KEY": "sk-ant-api03-" + "x" * 95,
            "OPENAI_API_KEY": "sk-proj-" + "y" * 48,
            "UPSTREAM_DB": "postgresql://app:s3cr3t@db.internal/app",
        }
        cli = [sys.executable, "-m", "orchestrator", "--db", str(db)]
        commands = {
            "ls": [*cli, "ls"],
            "show": [*cli, "show", refs["worker"]],
            "search": [*cli, "search", "off by"],
            "tree": [*cli, "tree", refs["lead"]],
        }
        baselines = _baselines(db, refs)
        times: dict[str, dict[str, list[float]]] = {
            c: {"fast": [], "slow": [], "baseline": [], "secret": []} for c in commands
        }
        for cmd in commands.values():  # warm the page cache and the .pyc files
            _wall(cmd, env)
            _wall(cmd, slow_env)
        for r in range(rounds):
            print(f"round {r + 1}/{rounds}", file=sys.stderr)
            for name, cmd in commands.items():
                times[name]["fast"].append(_wall(cmd, env))
                times[name]["secret"].append(_wall(cmd, secret_env))
                times[name]["slow"].append(_wall(cmd, slow_env))
                times[name]["baseline"].append(_wall([sys.executable, "-c", baselines[name]], env))
        count = _count(db)
        results: dict[str, Any] = {}
        for name, t in times.items():
            fast, slow, base, secret = (
                statistics.median(t[k]) for k in ("fast", "slow", "baseline", "secret")
            )
            results[name] = {
                "fast_ms": round(fast, 1),
                "slow_ms": round(slow, 1),
                "baseline_ms": round(base, 1),
                "secret_ms": round(secret, 1),
                "fast_over_baseline": round(fast / base, 2),
                "slow_over_fast": round(slow / fast, 2),
                "secret_over_fast": round(secret / fast, 3),
                "meets_goal": fast <= GOAL_MS,
            }
        doc: dict[str, Any] = {
            "goal": f"fast ≤ {GOAL_MS:.0f} ms wall per command on a quiet machine",
            "database": count,
            "rounds": rounds,
            "load_average": os.getloadavg(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "commands": results,
        }
        if opts.importtime:
            doc["importtime_fast_ls"] = _importtime(commands["ls"], env)
        json.dump(doc, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")


def _count(db: Path) -> dict[str, int]:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return {
            "threads": conn.execute("SELECT count(*) FROM threads").fetchone()[0],
            "messages": conn.execute("SELECT count(*) FROM messages").fetchone()[0],
        }
    finally:
        conn.close()


if __name__ == "__main__":
    main()
