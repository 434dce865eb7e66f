"""A job larger than any context (issue 27): a scripted job of BATCHES × SIZE workers whose
results need many times the lead's ceiling. Prints one JSON document.

- the job with ``lead_context_tokens = CEILING``: its status, the largest lead request (as the
  model counted it) against the ceiling, the results' size as a multiple of the ceiling, the
  number of handoffs, and every SPEC promise checked (``tests/bigjob.problems``);
- the handoff's cost: the loop's own timing of each handoff (ledger rendered, successor stored),
  and the ledger rendered alone at the job's final size, each as a ratio to one dispatch round
  trip (a one-task dispatch through the same job, measured in the same run); goal ≤ 50 ms at
  1,000 tasks;
- the whole job's wall time against the same job with an unlimited lead.

Run: python tests/benchmarks/bench_bigjob.py [--batches 25 --size 40 --ceiling 40000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import structlog

HANDOFF_MS: list[float] = []


def _capture(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """Keeps the loop's timing of each handoff; drops every log line (a benchmark prints JSON)."""
    if event.get("event") == "thread.handed_off":
        HANDOFF_MS.append(float(event["ms"]))
    raise structlog.DropEvent


structlog.configure(
    processors=[_capture], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
)

from orchestrator import Orchestrator  # noqa: E402
from orchestrator.runtime import handoff_ledger, job_of  # noqa: E402
from store import Kind  # noqa: E402
from tests.bigjob import big_job, largest_requests, problems  # noqa: E402
from workers import LoopEvent, estimate_tokens  # noqa: E402


async def run(root: Path, args: argparse.Namespace, ceiling: int | None) -> dict[str, Any]:
    """The job with ``ceiling`` (None: a lead with no ceiling to speak of), measured."""
    job = big_job(
        root,
        batches=args.batches,
        size=args.size,
        ceiling=ceiling or UNLIMITED,
        summary_chars=args.summary,
    )
    handoffs = 0

    def on_event(e: LoopEvent) -> None:
        nonlocal handoffs
        handoffs += e.kind == "handoff"

    db = root / "threads.db"
    async with await Orchestrator.open(str(db), on_event=on_event) as orch:
        t0 = time.perf_counter()
        outcome = await orch.run_job(job)
        wall = time.perf_counter() - t0
        store = orch.store
        job_id = outcome.job[2:]
        threads = await store.list_threads(job_id=job_id)
        results = sum(
            estimate_tokens(t.result.model_dump_json())
            for t in threads
            if t.kind == Kind.WORKER and t.result
        )
        leads = [t for t in threads if t.kind == Kind.LEAD]
        largest = largest_requests(db)
        out: dict[str, Any] = {
            "status": str(outcome.status),
            "error": outcome.error,
            "tasks": len(await store.dispatches.of_job(job_id)),
            "wall_s": round(wall, 2),
            "leads": len(leads),
            "handoffs": handoffs,
            "largest_lead_request_tokens": max(largest.get(t.id, 0) for t in leads),
            "results_tokens": results,
        }
        if ceiling is not None:
            out["problems"] = await problems(
                store, db, job_id, tasks=args.batches * args.size, ceiling=ceiling
            )
            spec = job_of(await store.get_thread(job_id))
            newest = max(leads, key=lambda t: t.id)
            renders = []
            for _ in range(5):
                t1 = time.perf_counter()
                ledger = await handoff_ledger(store, spec, job_id, newest)
                renders.append((time.perf_counter() - t1) * 1e3)
            out["ledger_render_ms_median"] = round(statistics.median(renders), 2)
            out["ledger_tokens"] = ledger.tokens
            out["ledger_collapsed"] = ledger.collapsed
            trips = []
            for i in range(3):
                t2 = time.perf_counter()
                await orch.dispatch(
                    outcome.job, [{"id": f"extra-{i}", "title": "one more", "prompt": "x"}]
                )
                trips.append((time.perf_counter() - t2) * 1e3)
            out["dispatch_round_trip_ms_median"] = round(statistics.median(trips), 2)
    return out


UNLIMITED = 10**9
"""The ceiling of the lead the job is compared with: never reached."""


async def main() -> None:
    ap = argparse.ArgumentParser()
    # the lead takes a turn per batch and one to report, within its 40 turns a run
    ap.add_argument("--batches", type=int, default=25)
    ap.add_argument("--size", type=int, default=40)
    ap.add_argument("--ceiling", type=int, default=40_000)
    ap.add_argument("--summary", type=int, default=1_200, help="characters of each result")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        limited = await run(Path(a), args, args.ceiling)
        handoff_ms = list(HANDOFF_MS)
        unlimited = await run(Path(b), args, None)
    trip = limited["dispatch_round_trip_ms_median"]
    print(
        json.dumps(
            {
                "benchmark": "bigjob",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "sqlite": sqlite3.sqlite_version,
                "workers": args.batches * args.size,
                "lead_context_tokens": args.ceiling,
                "limited": limited,
                "results_over_ceiling": round(limited["results_tokens"] / args.ceiling, 2),
                "largest_lead_request_over_ceiling": round(
                    limited["largest_lead_request_tokens"] / args.ceiling, 3
                ),
                "handoff_ms": {
                    "median": round(statistics.median(handoff_ms), 2) if handoff_ms else None,
                    "max": round(max(handoff_ms), 2) if handoff_ms else None,
                    "goal": "<= 50 at 1,000 tasks",
                },
                "handoff_max_over_dispatch_round_trip": round(max(handoff_ms) / trip, 3)
                if handoff_ms
                else None,
                "ledger_render_over_dispatch_round_trip": round(
                    limited["ledger_render_ms_median"] / trip, 3
                ),
                "unlimited_lead": unlimited,
                "wall_limited_over_unlimited": round(limited["wall_s"] / unlimited["wall_s"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
