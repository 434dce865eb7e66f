"""A job larger than one context, built in a real store with ``Store.hand_off`` (as
``tests/store/test_hand_off.py`` does): what every door's handoff test reads.

``build_chain`` stores a job of three leads — ``lead1`` handed off to ``lead2``, which handed off
to ``lead3`` (queued, never run) — where ``lead1`` dispatched ``w1`` and ``w2``, ``w2`` handed off
to ``w2b`` (same task, parent ``lead1``), and ``lead2`` dispatched ``w3``. Each thread that ran
used some tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store import (
    Kind,
    Lease,
    NewMessage,
    NewWorker,
    Result,
    SpawnRequest,
    Status,
    Store,
    TextBlock,
    ThreadInfo,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageRecord,
    new_id,
)


@dataclass(frozen=True)
class Chain:
    lead1: str
    lead2: str
    lead3: str
    w1: str
    w2: str
    w2b: str
    w3: str

    def ref(self, name: str) -> str:
        return f"T-{getattr(self, name)}"

    @property
    def leads(self) -> list[str]:
        return [self.ref(n) for n in ("lead1", "lead2", "lead3")]


def _used(tokens: int) -> UsageRecord:
    return UsageRecord(
        model="claude-sonnet-4-5", usage=Usage(input_tokens=tokens, output_tokens=10)
    )


async def _dispatch(store: Store, lead: str, call: str, keys: list[str]) -> list[ThreadInfo]:
    """``lead`` dispatches one task per key (its assistant turn stored first, as a run does)."""
    tasks = [{"id": k, "title": f"Task {k}", "prompt": f"do {k}"} for k in keys]
    await store.append(
        lead,
        NewMessage(
            role="assistant",
            content=[
                TextBlock(text=f"Dispatching {', '.join(keys)}."),
                ToolUseBlock(id=call, name="dispatch", input={"tasks": tasks}),
            ],
        ),
        usage=_used(1000),
    )
    workers = [
        NewWorker(
            i,
            k,
            title=f"Task {k}",
            task={"id": k, "title": f"Task {k}", "prompt": f"do {k}"},
            messages=(NewMessage.user(f"Task {k}: do {k}"),),
        )
        for i, k in enumerate(keys)
    ]
    spawned = await store.dispatches.spawn(SpawnRequest(lead, call, tuple(workers)))
    return [info for info, _ in spawned]


async def _finish(store: Store, worker: str, summary: str) -> None:
    await store.append(worker, NewMessage.assistant(summary), usage=_used(200))
    await store.set_status(worker, Status.RUNNING)
    await store.set_status(worker, Status.DONE, result=Result(status="done", summary=summary))


async def _hand_off(store: Store, thread: str, first: str, **successor: Any) -> str:
    """``thread`` (run under a lease, as a runner holds it) hands off to a new thread whose
    first message is ``first``; the successor's id."""
    await store.leases.acquire(thread, "runner", ttl_s=60, start=Status.RUNNING)
    new = new_id()
    await store.hand_off(
        Lease(thread, "runner"),
        result=None,
        successor={"id": new, **successor},
        messages=[NewMessage.user(first)],
    )
    return new


async def build_chain(store: Store, *, task: dict[str, Any] | None = None) -> Chain:
    """The job of the module's docstring; ``task``: the first lead's task (a run's job)."""
    lead1 = await store.create_thread(
        kind=Kind.LEAD,
        title="big-job",
        status=Status.QUEUED,
        task=task,
        messages=[NewMessage.user("Job: big-job. Goal: sweep every file.")],
    )
    w1, w2 = await _dispatch(store, lead1.id, "d1", ["a", "b"])
    await _finish(store, w1.id, "a is done")
    w2b = await _hand_off(store, w2.id, "Task b, continued: your earlier turns are T-…")
    await _finish(store, w2b, "b is done")
    await store.append(
        lead1.id,
        NewMessage(
            role="user",
            content=[ToolResultBlock(tool_use_id="d1", content="a: done; b: done")],
        ),
    )
    lead2 = await _hand_off(store, lead1.id, "Job ledger (handoff 1): a done, b done")
    (w3,) = await _dispatch(store, lead2, "d2", ["c"])
    await _finish(store, w3.id, "c is done")
    await store.append(
        lead2, NewMessage(role="user", content=[ToolResultBlock(tool_use_id="d2", content="c")])
    )
    lead3 = await _hand_off(store, lead2, "Job ledger (handoff 2): a, b, c done")
    return Chain(lead1.id, lead2, lead3, w1.id, w2.id, w2b, w3.id)
