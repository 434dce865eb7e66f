"""An append checks its runner's lease in its own transaction (issue 9 item 12)."""

from __future__ import annotations

import asyncio

import pytest

from store import Kind, LeaseLost, NewMessage, Status, Store, _threads


async def test_an_append_by_a_runner_whose_lease_was_taken_over_stores_nothing(
    store: Store,
) -> None:
    info = await store.create_thread(
        kind=Kind.WORKER, status=Status.QUEUED, messages=[NewMessage.user("go")]
    )
    tid = info.id
    await store.leases.acquire(tid, "A", ttl_s=-1)  # A's lease has already expired
    await store.leases.acquire(tid, "B", ttl_s=60)  # so B may take it over
    with pytest.raises(LeaseLost):
        await store.append(tid, NewMessage.assistant("A still talking"), lease_owner="A")
    stored = await store.append(tid, NewMessage.assistant("B's turn"), lease_owner="B")
    assert [m.seq for m in stored] == [2]
    texts = [m.content[0].text for m in await store.messages(tid)]  # type: ignore[union-attr]
    assert texts == ["go", "B's turn"]


async def test_an_expired_lease_fails_alone_in_a_group_commit(store: Store) -> None:
    a = await store.create_thread(kind=Kind.WORKER, messages=[NewMessage.user("a")])
    b = await store.create_thread(kind=Kind.WORKER, messages=[NewMessage.user("b")])
    await store.leases.acquire(a.id, "A", ttl_s=-1)
    await store.leases.acquire(b.id, "B", ttl_s=60)
    lost, kept = await asyncio.gather(
        store.append(a.id, NewMessage.assistant("late"), lease_owner="A"),
        store.append(b.id, NewMessage.assistant("on time"), lease_owner="B"),
        return_exceptions=True,
    )
    assert isinstance(lost, LeaseLost)
    assert not isinstance(kept, BaseException) and kept[0].seq == 2
    assert len(await store.messages(a.id)) == 1
    assert len(await store.messages(b.id)) == 2


async def test_a_status_write_by_a_runner_that_lost_its_lease_writes_nothing(
    store: Store,
) -> None:
    info = await store.create_thread(
        kind=Kind.WORKER, status=Status.QUEUED, messages=[NewMessage.user("go")]
    )
    await store.leases.acquire(info.id, "A", ttl_s=60)
    await store.set_status(info.id, Status.RUNNING, lease_owner="A")
    await store.leases.acquire(info.id, "B", ttl_s=60, replace="A")  # B took the thread over
    with pytest.raises(LeaseLost):
        await store.set_status(info.id, Status.DONE, lease_owner="A")
    raw = await store.db.read(lambda tx: _threads.get(tx, info.id), where="test")
    assert raw.status == Status.RUNNING and raw.lease_owner == "B"
    # an expired lease is lost too, even while nobody has taken it yet
    await store.leases.acquire(info.id, "B", ttl_s=-1)
    with pytest.raises(LeaseLost):
        await store.set_status(info.id, Status.FAILED, error="late", lease_owner="B")
    await store.leases.acquire(info.id, "C", ttl_s=60)
    done = await store.set_status(info.id, Status.DONE, lease_owner="C")
    assert done.status == Status.DONE


async def test_a_late_runner_is_told_it_lost_its_lease_not_that_the_status_is_wrong(
    store: Store,
) -> None:
    """The thread another runner finished meanwhile: a late write of ``interrupted`` is a lost
    lease (it was "cannot go from done to interrupted", a StatusError)."""
    info = await store.create_thread(
        kind=Kind.WORKER, status=Status.QUEUED, messages=[NewMessage.user("go")]
    )
    await store.leases.acquire(info.id, "A", ttl_s=60, start=Status.RUNNING)
    await store.leases.acquire(info.id, "B", ttl_s=60, replace="A", start=Status.RUNNING)
    await store.set_status(info.id, Status.DONE, lease_owner="B")
    with pytest.raises(LeaseLost, match="A no longer holds the lease"):
        await store.set_status(info.id, Status.INTERRUPTED, lease_owner="A")
    assert (await store.get_thread(info.id)).status == Status.DONE
