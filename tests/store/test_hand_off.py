"""``Store.hand_off`` (SPEC "Jobs larger than one context"): one transaction ends a thread
``done`` and starts its successor, at most once, under the runner's lease; the dispatch row of a
worker's task moves to the successor. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from store import (
    Kind,
    Lease,
    LeaseLost,
    NewMessage,
    NewWorker,
    Result,
    SpawnRequest,
    Status,
    Store,
    new_id,
)


def fix_dispatch(lead_id: str) -> SpawnRequest:
    """The lead's call ``toolu_1`` dispatching the one task ``fix``."""
    fix = NewWorker(0, "fix", messages=(NewMessage.user("Task fix"),))
    return SpawnRequest(lead_id, "toolu_1", (fix,))


async def _running(store: Store, owner: str = "A") -> tuple[str, Lease]:
    lead = await store.create_thread(
        kind=Kind.LEAD, title="job", status=Status.QUEUED, messages=[NewMessage.user("goal")]
    )
    await store.leases.acquire(lead.id, owner, ttl_s=60, start=Status.RUNNING)
    return lead.id, Lease(lead.id, owner)


async def test_a_handoff_ends_the_thread_and_starts_one_successor(store: Store) -> None:
    tid, lease = await _running(store)
    new = new_id()
    succ = await store.hand_off(
        lease,
        result=Result(status="done", summary="handed off"),
        successor={"id": new},
        messages=[NewMessage.user("the ledger")],
    )
    before = await store.get_thread(tid)
    assert (before.status, before.continued_by, before.lease_owner) == (Status.DONE, new, None)
    assert before.result is not None and before.result.summary == "handed off"
    assert (succ.id, succ.continues, succ.status) == (new, tid, Status.QUEUED)
    assert (succ.kind, succ.job_id, succ.title) == (Kind.LEAD, tid, "job")
    assert [m.text for m in await store.messages(new)] == ["the ledger"]
    # the fast path reads the same links
    listed = {t.id: t for t in await store.list_threads(job_id=tid)}
    assert listed[tid].continued_by == new and listed[new].continues == tid


async def test_a_second_handoff_of_the_same_thread_returns_its_successor(store: Store) -> None:
    tid, lease = await _running(store)
    first = await store.hand_off(
        lease, result=None, successor={"id": new_id()}, messages=[NewMessage.user("ledger")]
    )
    again = await store.hand_off(
        Lease(tid, "A"), result=None, successor={"id": new_id()}, messages=[NewMessage.user("x")]
    )
    assert again.id == first.id
    assert len(await store.list_threads(job_id=tid)) == 2


async def test_two_handoffs_at_once_leave_exactly_one_successor(store: Store) -> None:
    tid, _ = await _running(store)
    got = await asyncio.gather(
        *(
            store.hand_off(
                Lease(tid, "A"),
                result=None,
                successor={"id": new_id()},
                messages=[NewMessage.user(f"ledger {i}")],
            )
            for i in range(4)
        ),
        return_exceptions=True,
    )
    ids = {g.id for g in got if not isinstance(g, BaseException)}
    assert len(ids) == 1
    assert len(await store.list_threads(job_id=tid)) == 2


async def test_a_runner_that_lost_its_lease_hands_nothing_off(store: Store) -> None:
    tid, _ = await _running(store, owner="A")
    await store.leases.acquire(tid, "B", ttl_s=60, replace="A")
    with pytest.raises(LeaseLost):
        await store.hand_off(Lease(tid, "A"), result=None, successor={"id": new_id()}, messages=[])
    info = await store.get_thread(tid)
    assert info.continued_by is None and info.status == Status.RUNNING
    assert len(await store.list_threads(job_id=tid)) == 1


async def test_a_worker_handoff_moves_its_dispatch_row(store: Store) -> None:
    lead = await store.create_thread(kind=Kind.LEAD, messages=[NewMessage.user("goal")])
    [(worker, _)] = await store.dispatches.spawn(fix_dispatch(lead.id))
    await store.leases.acquire(worker.id, "W", ttl_s=60, start=Status.RUNNING)
    succ = await store.hand_off(
        Lease(worker.id, "W"),
        result=None,
        successor={"id": new_id()},
        messages=[NewMessage.user("Task fix, continued")],
    )
    assert (succ.kind, succ.parent_id, succ.continues) == (Kind.WORKER, lead.id, worker.id)
    [row] = await store.dispatches.of_job(lead.id)
    assert (row.task_key, row.worker_id) == ("fix", succ.id)
    # a replay of the dispatch finds the task's newest worker
    [(again, created)] = await store.dispatches.spawn(fix_dispatch(lead.id))
    assert (again.id, created) == (succ.id, False)
