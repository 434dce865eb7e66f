"""How ``Leases.hold`` leaves a thread when its block ends (SPEC: a thread's status tells the
truth): with the run's last write (``Store.finish``) the status is that write's; without it —
an error escaped the run, or its end could not be written — the thread is not left ``running``
with nobody holding it (it read ``running`` for ever: a Temporal host reported such a run and
the job ended with a worker that said ``running``), but ``interrupted``, resumable."""

from __future__ import annotations

import pytest

from store import LeaseLost, Status, Store


async def _running_thread(store: Store) -> str:
    info = await store.create_thread(kind="worker", title="w", status=Status.QUEUED)
    return info.id


async def _crashing_run(store: Store, tid: str) -> None:
    async with store.leases.hold(tid, "runner-a", ttl_s=30, start=Status.RUNNING):
        assert (await store.get_thread(tid)).status == Status.RUNNING
        raise RuntimeError("boom")


async def _ended_then_raised(store: Store, tid: str) -> None:
    async with store.leases.hold(tid, "runner-a", ttl_s=30, start=Status.RUNNING) as lease:
        await store.finish(lease, Status.FAILED, error="it failed")
        raise RuntimeError("after the end")  # e.g. reporting it failed


async def _overtaken(store: Store, tid: str) -> None:
    async with store.leases.hold(tid, "runner-a", ttl_s=30, start=Status.RUNNING):
        # another runner takes the thread over (runner-a presumed dead), then the first one's
        # write is refused
        await store.leases.acquire(tid, "runner-b", ttl_s=30, replace="runner-a")
        await store.set_status(tid, Status.DONE, lease_owner="runner-a")


async def test_an_error_escaping_the_block_leaves_the_thread_interrupted(store: Store) -> None:
    tid = await _running_thread(store)
    with pytest.raises(RuntimeError, match="boom"):
        await _crashing_run(store, tid)
    after = await store.get_thread(tid)
    assert after.status == Status.INTERRUPTED
    assert after.lease_owner is None and after.lease_expires_at is None
    # and it is resumable: the next runner takes it
    async with store.leases.hold(tid, "runner-b", ttl_s=30, start=Status.RUNNING) as lease:
        await store.finish(lease, Status.DONE)
    assert (await store.get_thread(tid)).status == Status.DONE


async def test_a_block_that_wrote_its_end_keeps_that_status(store: Store) -> None:
    tid = await _running_thread(store)
    with pytest.raises(RuntimeError, match="after the end"):
        await _ended_then_raised(store, tid)
    after = await store.get_thread(tid)
    assert (after.status, after.error, after.lease_owner) == (Status.FAILED, "it failed", None)


async def test_a_block_that_lost_its_lease_leaves_the_new_owners_thread_alone(
    store: Store,
) -> None:
    tid = await _running_thread(store)
    with pytest.raises(LeaseLost):
        await _overtaken(store, tid)
    after = await store.get_thread(tid)
    assert (after.status, after.lease_owner) == (Status.RUNNING, "runner-b")
