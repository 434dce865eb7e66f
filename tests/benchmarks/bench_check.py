"""The result check as a classifier, and what it costs (SPEC "Checked results"). Prints one JSON
document.

- classifier: real scripted jobs (``tests/check_corpus.py``: real files in a real git workspace,
  real pytest runs, real commands) whose workers do their task honestly — ten variations honest
  workers show — or with one fabrication of seven kinds. A fabricated result is caught when its
  stored check is not ``verified`` or it was sent back (rounds > 1); an honest one is a false
  positive on the same test. Half the corpus runs with worktree isolation (changes from the
  worktree diff), half without (from the thread's own records). Goals: recall ≥ 0.95, false
  positives ≤ 0.03.
- check cost: the check of a result at a 2,000-message worker thread (1,000 tool calls: bash with
  recorded effects, edits, reads) — the history scan and rules, plus the lineage read the
  runtime's hook makes — as a ratio to the result's store write measured in the same run. Goal:
  ≤ 5 ms.
- bash recording: a ``bash`` call with its before/after snapshots against the same call
  without them (``BashTool._run``), in the corpus workspace and in one of 5,000 files.

Run: python tests/benchmarks/bench_check.py [--honest-each 15 --fabricated-each 9]
     [--costs-only]  (the two cost figures alone, in seconds rather than twenty minutes)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
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
from orchestrator.runtime.check import check_result  # noqa: E402
from store import (  # noqa: E402
    Change,
    Effects,
    Finding,
    Kind,
    NewMessage,
    Result,
    Store,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Verification,
)
from tests.check_corpus import FABRICATED, HONEST, cases, seed_workspace, write_job  # noqa: E402
from workers.tools import BashTool, ToolContext  # noqa: E402


async def classify(root: Path, honest_each: int, fabricated_each: int) -> dict[str, Any]:
    """Run the corpus; the verdicts, per kind and overall."""
    per_kind: dict[str, list[bool]] = {}
    wall: dict[str, float] = {}
    half_h, half_f = (honest_each + 1) // 2, (fabricated_each + 1) // 2
    plans = [
        ("worktree", 4, cases(half_h, half_f)),
        ("none", 1, cases(honest_each - half_h, fabricated_each - half_f)),
    ]
    for isolation, parallel, chosen in plans:
        job = write_job(root, f"bench-{isolation}", chosen, isolation=isolation, parallel=parallel)
        by_task = {c.task: c for c in chosen}
        start = time.perf_counter()
        async with await Orchestrator.open(str(root / f"{isolation}.db")) as orch:
            out = await orch.run_job(job)
            wall[isolation] = round(time.perf_counter() - start, 1)
            for w in out.workers:
                case = by_task[w.task or ""]
                info = await orch.store.get_thread(w.ref[2:])
                check = info.result.check if info.result else None
                flagged = check is None or check.verdict != "verified" or check.rounds > 1
                key = ("fabricated:" if case.fabricated else "honest:") + case.kind
                per_kind.setdefault(key, []).append(flagged)
    fabricated = [f for k, v in per_kind.items() if k.startswith("fabricated:") for f in v]
    honest = [f for k, v in per_kind.items() if k.startswith("honest:") for f in v]
    return {
        "fabricated": len(fabricated),
        "honest": len(honest),
        "recall": round(sum(fabricated) / len(fabricated), 4),
        "false_positive_rate": round(sum(honest) / len(honest), 4),
        "goals": {"recall_min": 0.95, "false_positive_rate_max": 0.03},
        "caught_per_fabricated_kind": {
            k.split(":", 1)[1]: f"{sum(v)}/{len(v)}"
            for k, v in per_kind.items()
            if k.startswith("fabricated:")
        },
        "flagged_per_honest_kind": {
            k.split(":", 1)[1]: f"{sum(v)}/{len(v)}"
            for k, v in per_kind.items()
            if k.startswith("honest:")
        },
        "kinds": {"honest": list(HONEST), "fabricated": list(FABRICATED)},
        "wall_s": wall,
    }


def long_history(n_calls: int) -> list[NewMessage]:
    """A worker's transcript of ``n_calls`` tool calls (2 messages each, plus the task)."""
    msgs = [NewMessage.user("Task t: fix it")]
    for k in range(n_calls):
        i = f"c{k}"
        if k % 3 == 0:
            use = ToolUseBlock(id=i, name="bash", input={"command": f"cd pkg && pytest -q t{k}.py"})
            effects = Effects(exit_code=k % 2, changed=[Change(path=f"pkg/o{k}", action="added")])
            out = ToolResultBlock(
                tool_use_id=i, content="." * 200 + "\n[exit code: 0]", effects=effects
            )
        elif k % 3 == 1:
            use = ToolUseBlock(
                id=i, name="edit_file", input={"path": f"pkg/m{k % 50}.py", "old": "a", "new": "b"}
            )
            effects = Effects(changed=[Change(path=f"pkg/m{k % 50}.py", action="modified")])
            out = ToolResultBlock(tool_use_id=i, content="Replaced 1 occurrence", effects=effects)
        else:
            use = ToolUseBlock(id=i, name="read_file", input={"path": f"pkg/m{k % 50}.py"})
            out = ToolResultBlock(tool_use_id=i, content="x = 1\n" * 40)
        msgs.append(NewMessage(role="assistant", content=[TextBlock(text="next"), use]))
        msgs.append(NewMessage(role="user", content=[out]))
    return msgs


async def check_cost(root: Path, n_calls: int, rounds: int) -> dict[str, Any]:
    store = await Store.open(str(root / "cost.db"))
    try:
        info = await store.create_thread(
            kind=Kind.WORKER, title="long", messages=long_history(n_calls)
        )
        history = await store.messages(info.id)
        ref = info.ref
        result = Result(
            status="done",
            summary="fixed",
            findings=[Finding(claim=f"c{j}", evidence=[f"{ref}#{2 * j + 3}"]) for j in range(5)],
            verification=[
                Verification(
                    command=f"pytest -q t{3 * (n_calls // 3 - j - 1)}.py", outcome="passed"
                )
                for j in range(5)
            ],
            changes=[Change(path=f"pkg/m{j}.py", action="modified") for j in range(1, 6)],
        )
        checks, writes = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            ancestry = await store.ancestry(info.id)
            checked = check_result(result, thread_id=info.id, history=history, ancestry=ancestry)
            t1 = time.perf_counter()
            await store.set_result(info.id, result.model_copy(update={"check": checked}))
            t2 = time.perf_counter()
            checks.append(t1 - t0)
            writes.append(t2 - t1)
        check_ms, write_ms = statistics.median(checks) * 1e3, statistics.median(writes) * 1e3
        return {
            "messages": len(history),
            "claims": len(checked.claims),
            "check_ms": round(check_ms, 3),
            "result_write_ms": round(write_ms, 3),
            "ratio_check_to_write": round(check_ms / write_ms, 2),
            "goal_check_ms_max": 5.0,
        }
    finally:
        await store.close()


async def bash_cost(ws: Path, runs: int) -> dict[str, Any]:
    tool, ctx = BashTool(), ToolContext(workspace=ws)
    args = BashTool.Input(command="true")
    plain, recorded = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        await tool._run(args, ctx)
        t1 = time.perf_counter()
        await tool.run(args, ctx)
        t2 = time.perf_counter()
        plain.append(t1 - t0)
        recorded.append(t2 - t1)
    files = sum(1 for p in ws.rglob("*") if p.is_file() and ".git" not in p.parts)
    p_ms, r_ms = statistics.median(plain) * 1e3, statistics.median(recorded) * 1e3
    return {
        "files": files,
        "bash_ms": round(p_ms, 2),
        "bash_recorded_ms": round(r_ms, 2),
        "ratio_recorded_to_plain": round(r_ms / p_ms, 2),
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--honest-each", type=int, default=15)
    ap.add_argument("--fabricated-each", type=int, default=9)
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--costs-only", action="store_true", help="skip the classifier's corpus")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        root = Path(tmp)
        cost = await check_cost(root, a.messages // 2, a.rounds)
        small = root / "small"
        seed_workspace(small, 20)
        big = root / "big"
        seed_workspace(big, 1)
        for d in range(50):
            (big / f"d{d}").mkdir()
            for f in range(100):
                (big / f"d{d}" / f"f{f}.txt").write_text("x")
        bash = {
            "corpus_workspace": await bash_cost(small, 30),
            "5000_files": await bash_cost(big, 15),
        }
        classifier = (
            None if a.costs_only else await classify(root, a.honest_each, a.fabricated_each)
        )
    doc = {
        "benchmark": "result check",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
        "classifier": classifier,
        "check_cost": cost,
        "bash_recording": bash,
    }
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
