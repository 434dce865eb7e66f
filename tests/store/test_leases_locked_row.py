"""Taking a lease on a row another writer holds locked (issue 14: a host frozen mid-write).

A Temporal host SIGSTOPped inside a transaction keeps its row locks (its socket stays open). The
host taking its thread over waited on that lock and dated its lease from before the wait, so the
lease was born expired and its own first append was refused ("no longer holds the lease (held by
<itself>)"). Now the lease runs from when the row is got, the wait is bounded (the taker gives way
with ``LeaseHeld``, owner ``None``, and tries again later), and the server ends a session left
idle in a transaction (or the taker ends a write transaction stalled on its client), so the
frozen host's locks go."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from store import Kind, LeaseHeld, LeaseLost, NewMessage, Status, Store, _engine, _leases
from tests import pg

pytestmark = pytest.mark.postgres


@pytest.fixture
def backend() -> str:
    """Row locks held across sessions: PostgreSQL only (SQLite has one writer at a time)."""
    pg.require()
    return "postgres"


async def _locker(store: Store, thread_id: str) -> asyncpg.Connection:
    """Another host's session holding the thread's row in an open transaction."""
    conn = await asyncpg.connect(store.db.url.set(drivername="postgresql").render_as_string(False))
    tx = conn.transaction()
    await tx.start()
    await conn.execute("SELECT id FROM threads WHERE id = $1 FOR UPDATE", thread_id)
    return conn


async def _thread(store: Store) -> str:
    info = await store.create_thread(
        kind=Kind.WORKER, status=Status.QUEUED, messages=[NewMessage.user("go")]
    )
    return info.id


async def test_a_lease_taken_after_waiting_for_the_row_runs_from_when_it_was_taken(
    store: Store,
) -> None:
    tid = await _thread(store)
    locker = await _locker(store, tid)
    taking = asyncio.create_task(store.leases.acquire(tid, "B", ttl_s=60))
    # the taker is waiting on the row (its statement blocked in the server)
    while not await locker.fetchval(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
    ):
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.5)  # the wait lasts; a lease dated from before it would be short
    released_at = datetime.now(UTC)
    await locker.close()  # the other host's transaction ends
    await taking
    info = await store.get_thread(tid)
    assert info.lease_owner == "B"
    assert info.lease_expires_at is not None
    assert info.lease_expires_at >= released_at + timedelta(seconds=60)
    stored = await store.append(tid, NewMessage.assistant("B's turn"), lease_owner="B")
    assert [m.seq for m in stored] == [2]


async def test_a_row_locked_too_long_gives_way_without_stalling_the_writer(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_leases, "LOCK_WAIT_S", 0.2)
    tid, other = await _thread(store), await _thread(store)
    locker = await _locker(store, tid)
    try:
        with pytest.raises(LeaseHeld) as held:
            await store.leases.acquire(tid, "B", ttl_s=60)
        assert held.value.owner is None  # nobody holds the lease: try again later
        assert "locked by another writer" in str(held.value)
        # this process's writes go on (the failed take rolled back, its lock wait with it)
        await store.leases.acquire(other, "B", ttl_s=60)
        await store.append(other, NewMessage.assistant("on"), lease_owner="B")
    finally:
        await locker.close()
    await store.leases.acquire(tid, "B", ttl_s=60)  # the row is free again
    assert (await store.get_thread(tid)).lease_owner == "B"


async def test_a_session_left_idle_in_a_transaction_is_ended_by_the_server(
    store: Store,
) -> None:
    async def setting() -> str:
        async with store.db.writer.connect() as conn:
            got = await conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout")
            return str(got.scalar())

    assert await setting() == f"{_engine.IDLE_IN_TRANSACTION_MS // 1000}s"


async def test_a_writer_stalled_in_its_transaction_is_ended_so_the_lease_can_be_taken(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_leases, "LOCK_WAIT_S", 0.2)
    monkeypatch.setattr(_leases, "STALLED_S", 0.0)  # any silent write transaction is stalled
    tid = await _thread(store)
    locker = await _locker(store, tid)
    ended = asyncio.Event()
    locker.add_termination_listener(lambda _conn: ended.set())
    try:
        await store.leases.acquire(tid, "B", ttl_s=60)  # the locker's session was ended
        assert (await store.get_thread(tid)).lease_owner == "B"
        # the server closes the session: the client hears of it when its socket does (using
        # the connection before that raced the news: "another operation is in progress")
        async with asyncio.timeout(30):
            await ended.wait()
        assert locker.is_closed()
    finally:
        await locker.close()


async def test_an_append_after_its_own_lease_expired_says_so(store: Store) -> None:
    tid = await _thread(store)
    await store.leases.acquire(tid, "A", ttl_s=-1)  # born expired, as the stale date made it
    with pytest.raises(LeaseLost, match="its lease expired before this append"):
        await store.append(tid, NewMessage.assistant("late"), lease_owner="A")
    await store.leases.acquire(tid, "B", ttl_s=60)
    with pytest.raises(LeaseLost, match="the lease is held by B"):
        await store.append(tid, NewMessage.assistant("late"), lease_owner="A")
