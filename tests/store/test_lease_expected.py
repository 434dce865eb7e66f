"""A lease taken with the run's first status from ``expected`` statuses only — checked in the
lease's own transaction (SPEC: statuses tell the truth). A run without a new message carries on
a thread nobody ended; one that raced the thread's end (a stale Temporal attempt that started
after another attempt finished the thread) must not take it back to ``running``."""

from __future__ import annotations

import pytest

from store import Status, StatusError, Store

UNENDED = {Status.IDLE, Status.QUEUED, Status.RUNNING, Status.INTERRUPTED}


async def _done_thread(store: Store) -> str:
    info = await store.create_thread(kind="worker", title="w", status=Status.QUEUED)
    async with store.leases.hold(info.id, "runner-a", ttl_s=30, start=Status.RUNNING) as lease:
        await store.finish(lease, Status.DONE)
    return info.id


async def test_an_ended_thread_refuses_the_lease_and_keeps_how_it_ended(store: Store) -> None:
    tid = await _done_thread(store)
    before = await store.get_thread(tid)
    with pytest.raises(StatusError, match="is done, expected"):
        async with store.leases.hold(
            tid, "runner-b", ttl_s=30, start=Status.RUNNING, expected=UNENDED
        ):
            raise AssertionError("the block must not run")
    after = await store.get_thread(tid)
    assert after.status == Status.DONE
    assert after.lease_owner is None and after.lease_expires_at is None
    assert after.version == before.version  # nothing was written


async def test_acquire_refuses_an_unexpected_status_and_takes_nothing(store: Store) -> None:
    tid = await _done_thread(store)
    with pytest.raises(StatusError):
        await store.leases.acquire(
            tid, "runner-b", ttl_s=30, start=Status.RUNNING, expected=UNENDED
        )
    assert (await store.get_thread(tid)).lease_owner is None


@pytest.mark.parametrize("status", [Status.QUEUED, Status.INTERRUPTED])
async def test_an_unended_thread_is_taken_as_before(store: Store, status: Status) -> None:
    info = await store.create_thread(kind="worker", title="w", status=Status.QUEUED)
    if status == Status.INTERRUPTED:
        async with store.leases.hold(info.id, "a", ttl_s=30, start=Status.RUNNING):
            pass  # left without its end: interrupted
    assert (await store.get_thread(info.id)).status == status
    async with store.leases.hold(
        info.id, "runner-b", ttl_s=30, start=Status.RUNNING, expected=UNENDED
    ) as lease:
        assert (await store.get_thread(info.id)).lease_owner == "runner-b"
        await store.finish(lease, Status.DONE)
    assert (await store.get_thread(info.id)).status == Status.DONE
