"""Orchestrator benchmarks (issue: the orchestrator). Prints one JSON document.

- orchestration overhead: a job of WORKERS workers × TURNS turns each on a zero-latency
  scripted model (a cheap ``list_files`` call per turn), run through the real Orchestrator
  (lead, dispatch rows, semaphore, budget checks, leases); wall time per worker turn as a ratio
  to the bare store append measured in the same run.
- lead context economy: a 50-task job whose workers each produce ~200 KB of transcript (real
  ``bash`` output); the lead's largest request (system + tools + messages as sent) as a share of
  all transcripts' total size. Goal ≤ 0.05.

Run: python tests/benchmarks/bench_orchestrator.py [--workers 200 --turns 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import structlog

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

from orchestrator import Orchestrator  # noqa: E402
from store import Kind, NewMessage, Store  # noqa: E402
from workers._request import model_view  # noqa: E402


def job_file(
    root: Path, name: str, n: int, worker_turns: list[dict[str, Any]], parallel: int
) -> Path:
    script = {
        "rules": [
            {
                "match": f"Job: {name}",
                "turns": [{"text": "All tasks are done; see the workers' results."}],
            },
            {"match": "(?m)^Task ", "turns": worker_turns},
        ]
    }
    (root / f"{name}.json").write_text(json.dumps(script))
    tasks = "\n".join(
        f'[[task]]\nid = "t{i}"\ntitle = "task {i}"\nprompt = "do part {i}"\n' for i in range(n)
    )
    job = root / f"{name}.toml"
    job.write_text(
        f'[job]\nname = "{name}"\ngoal = "benchmark"\nworkspace = "ws"\n'
        f'model = "scripted:{name}.json"\nmax_parallel = {parallel}\n\n'
        f"[job.worker]\nmax_turns = 50\ntimeout_s = 600\n\n{tasks}"
    )
    return job


SUBMIT = {
    "tool_calls": [
        {"name": "submit_result", "input": {"status": "done", "summary": "done with my part"}}
    ]
}


async def bare_append_ms(db: str, n: int = 400) -> float:
    store = await Store.open(db)
    info = await store.create_thread(kind=Kind.WORKER, messages=[NewMessage.user("x")])
    msg = NewMessage.assistant("a reply of ordinary length " * 4)
    t0 = time.perf_counter()
    for _ in range(n):
        await store.append(info.id, msg)
    elapsed = time.perf_counter() - t0
    await store.close()
    return elapsed / n * 1e3


async def overhead(root: Path, workers: int, turns: int) -> dict[str, Any]:
    worker_turns = [
        {
            "tool_calls": [{"name": "list_files", "input": {}}],
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }
        for _ in range(turns - 1)
    ] + [SUBMIT]
    job = job_file(root, "overhead", workers, worker_turns, parallel=16)
    async with await Orchestrator.open(str(root / "overhead.db")) as orch:
        t0 = time.perf_counter()
        outcome = await orch.run_job(job)
        elapsed = time.perf_counter() - t0
    total_turns = workers * turns
    done = [w for w in outcome.workers if w.status == "done"]
    if len(done) != workers:
        raise SystemExit(f"only {len(done)} of {workers} workers finished: {outcome.error}")
    return {
        "workers": workers,
        "turns_per_worker": turns,
        "status": str(outcome.status),
        "wall_s": round(elapsed, 2),
        "per_worker_turn_ms": round(elapsed / total_turns * 1e3, 3),
    }


async def economy(root: Path, tasks: int = 50) -> dict[str, Any]:
    # each worker: 10 tool calls printing ~20 KB each -> ~200 KB of transcript per worker
    big = "python3 -c \"import sys; sys.stdout.write(('line of build output ' * 40 + '\\n') * 24)\""
    worker_turns = [
        {"tool_calls": [{"name": "bash", "input": {"command": big}}]} for _ in range(10)
    ]
    worker_turns.append(SUBMIT)
    job = job_file(root, "economy", tasks, worker_turns, parallel=8)
    async with await Orchestrator.open(str(root / "economy.db")) as orch:
        outcome = await orch.run_job(job)
        store = orch.store
        lead = await store.get_thread(outcome.lead[2:])
        lead_msgs = await store.messages(lead.id)
        total = 0
        for w in await store.job_tree(lead.id):
            for m in await store.messages(w.id):
                total += len(json.dumps([b.model_dump(mode="json") for b in m.content]))
        # the lead's largest request is its last one: everything before its report, as the
        # model sees it (tool outputs capped), plus the system prompt
        history = lead_msgs[:-1]
        req_chars = len(lead.system_prompt or "") + sum(
            len(json.dumps([b.model_dump(mode="json") for b in model_view(m, 30_000).content]))
            for m in history
        )
    return {
        "tasks": tasks,
        "status": str(outcome.status),
        "all_transcripts_chars": total,
        "per_worker_transcript_kb": round(total / tasks / 1024, 1),
        "lead_largest_request_chars": req_chars,
        "share": round(req_chars / total, 4),
        "goal": "<= 0.05",
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=200)
    ap.add_argument("--turns", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        append_ms = await bare_append_ms(str(root / "bare.db"))
        ov = await overhead(root, args.workers, args.turns)
        ov["bare_store_append_ms"] = round(append_ms, 3)
        ov["per_worker_turn_over_bare_append"] = round(ov["per_worker_turn_ms"] / append_ms, 2)
        eco = await economy(root)
    print(
        json.dumps(
            {
                "benchmark": "orchestrator",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "sqlite": sqlite3.sqlite_version,
                "orchestration_overhead": ov,
                "lead_context_economy": eco,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
