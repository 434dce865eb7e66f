"""A scripted job larger than its lead's context (SPEC "Jobs larger than one context"), shared by
the chaos suite (``tests/faults/test_bigjob_chaos.py``) and the benchmark
(``tests/benchmarks/bench_bigjob.py``), and the checks every such job must pass.

The lead dispatches ``batches`` batches of ``size`` tasks, one batch a turn, then reports. Its
script is stateless (SPEC §Scripted model), so a successor lead, whose only user message is the
job's ledger, must find where the chain stands from the ledger alone: one rule per batch, newest
first, matches the newest batch the ledger names (task ids ``bNNN-tNN`` stay in the ledger even
when an entry collapses) and dispatches the batches after it. Each worker appends its own ref to
``markers.log`` (a worker run twice would write it twice), then submits a result whose summary
is ``summary_chars`` long, so the results together need many times the lead's ceiling.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from store import Kind, Status, Store, TextBlock, ToolResultBlock, ToolUseBlock

REPORT = "Report: every batch was dispatched and reviewed."


def task_id(batch: int, index: int) -> str:
    return f"b{batch:03d}-t{index:02d}"


def _dispatch(batch: int, size: int) -> dict[str, Any]:
    tasks = [
        {"id": task_id(batch, j), "title": f"part {batch}.{j}", "prompt": f"do part {batch}.{j}"}
        for j in range(size)
    ]
    return {"tool_calls": [{"name": "dispatch", "input": {"tasks": tasks}}]}


def big_job(
    root: Path,
    *,
    batches: int,
    size: int,
    ceiling: int | None,
    summary_chars: int = 600,
    parallel: int = 4,
    name: str = "big",
) -> Path:
    """The job file (and its script) under ``root``, its workspace ``root/ws``; ``ceiling``:
    its ``lead_context_tokens`` (None: the default)."""
    (root / "ws").mkdir(parents=True, exist_ok=True)
    remaining = [_dispatch(b, size) for b in range(batches)]
    report = {"text": REPORT}
    rules: list[dict[str, Any]] = [
        {"match": rf"\[{task_id(b, 0)[:4]}-", "turns": [*remaining[b + 1 :], report]}
        for b in reversed(range(batches))
    ]
    rules.append({"match": f"Job: {name}", "turns": [*remaining, report]})
    filler = ("the part is done and checked; " * (summary_chars // 30 + 1))[:summary_chars]
    rules.append(
        {
            "match": r"(?m)^Task b\d+-t\d+:",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "bash", "input": {"command": "echo {{thread}} >> markers.log"}}
                    ]
                },
                {
                    "tool_calls": [
                        {
                            "name": "submit_result",
                            "input": {"status": "done", "summary": f"{{{{thread}}}}: {filler}"},
                        }
                    ]
                },
            ],
        }
    )
    (root / f"{name}.json").write_text(json.dumps({"rules": rules}))
    lines = [
        "[job]",
        f'name = "{name}"',
        'goal = "Dispatch every batch of parts and report."',
        'workspace = "ws"',
        f'model = "scripted:{name}.json"',
        f"max_parallel = {parallel}",
        'sandbox = "none"',
    ]
    if ceiling is not None:
        lines.append(f"lead_context_tokens = {ceiling}")
    lines += ["", "[job.worker]", 'tools = ["bash"]']
    path = root / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def largest_requests(db: Path) -> dict[str, int]:
    """Each thread's largest request as its model counted it (its usage rows' whole input)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT thread_id, max(input_tokens + cache_read_input_tokens"
            " + cache_creation_input_tokens) FROM usage GROUP BY thread_id"
        ).fetchall()
    return {str(t): int(n) for t, n in rows}


def _text(blocks: Any) -> str:
    out = []
    for b in blocks:
        if isinstance(b, (TextBlock, ToolResultBlock)):
            out.append(b.text)
    return "\n".join(out)


async def problems(
    store: Store, db: Path, job_id: str, *, tasks: int, ceiling: int, ended: bool = True
) -> list[str]:
    """What a finished big job breaks of SPEC's promises: each task has exactly one dispatch
    row and one result (its newest worker's, ``done``); no worker ran twice; every result
    reached a lead (its ref is in a lead's dispatch result or ledger); no lead request exceeded
    the ceiling; the leads form one chain; every tool call is answered. ``ended``: the job ran
    to its report."""
    bad: list[str] = []
    threads = await store.list_threads(job_id=job_id, oldest_first=True)
    leads = [t for t in threads if t.kind == Kind.LEAD]
    rows = await store.dispatches.of_job(job_id)
    keys = Counter(r.task_key for r in rows)
    dup = [k for k, n in keys.items() if n > 1]
    if dup:
        bad.append(f"tasks dispatched more than once: {dup[:5]}")
    if len(keys) != tasks:
        bad.append(f"{len(keys)} tasks dispatched, not {tasks}")
    by_id = {t.id: t for t in threads}
    for r in rows:
        w = by_id[r.worker_id]
        if ended and (w.status != Status.DONE or w.result is None):
            bad.append(f"task {r.task_key}: {w.ref} is {w.status} with result {w.result}")
    workers = [t for t in threads if t.kind == Kind.WORKER]
    if len(workers) != len(rows):
        bad.append(f"{len(workers)} worker threads for {len(rows)} tasks")
    markers = Counter((Path(db).parent / "ws" / "markers.log").read_text().split())
    twice = [m for m, n in markers.items() if n > 1]
    if twice:
        bad.append(f"workers that ran their command twice: {twice[:5]}")
    # every result reached a lead
    seen = ""
    for lead in leads:
        seen += "\n".join(_text(m.content) for m in await store.messages(lead.id))
    lost = [r.task_key for r in rows if by_id[r.worker_id].ref not in seen]
    if ended and lost:
        bad.append(f"results no lead received: {lost[:5]} ({len(lost)} in all)")
    # one chain of leads, every request under the ceiling
    first = [t for t in leads if t.continues is None]
    chain = [first[0]] if len(first) == 1 else []
    while chain and chain[-1].continued_by is not None:
        chain.append(by_id[chain[-1].continued_by])
    if len(first) != 1 or len(chain) != len(leads):
        bad.append(f"the leads are not one chain: {len(leads)} leads, {len(chain)} chained")
    largest = largest_requests(db)
    over = {t.ref: largest[t.id] for t in leads if largest.get(t.id, 0) > ceiling}
    if over:
        bad.append(f"lead requests over the ceiling of {ceiling:,}: {over}")
    if ended and leads and leads[-1].status != Status.DONE:
        bad.append(f"the newest lead {leads[-1].ref} is {leads[-1].status}: {leads[-1].error}")
    for t in threads:
        msgs = await store.messages(t.id)
        for i, m in enumerate(msgs):
            uses = sorted(b.id for b in m.content if isinstance(b, ToolUseBlock))
            if not uses:
                continue
            if i + 1 == len(msgs):
                if ended or t.status not in (Status.RUNNING, Status.INTERRUPTED):
                    bad.append(f"{t.ref}#{m.seq} unanswered")
                continue
            got = sorted(
                b.tool_use_id for b in msgs[i + 1].content if isinstance(b, ToolResultBlock)
            )
            if got != uses:
                bad.append(f"{t.ref}#{m.seq} answered by {got}, not {uses}")
    return bad
