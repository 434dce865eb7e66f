"""Runner leases (``store.leases``): which one runner owns a thread, until when.

A runner acquires the lease before it writes, renews it while it runs and releases it when it
stops; appends and status writes given a ``lease_owner`` are refused (``LeaseLost``) once it is
gone. ``hold`` does all of that around a block of code: the renewing runs in the background, and
a lease lost meanwhile (another runner took the thread over) cancels the holder at once — the
block ends with ``LeaseLost`` — so it writes nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import structlog

from . import _threads
from ._engine import finish_uncancelled
from ._liveness import owner_is_dead
from ._sqlite import LockTimeout, Tx, utcnow
from .errors import LeaseHeld, LeaseLost
from .models import Status, ThreadInfo
from .refs import format_ref

if TYPE_CHECKING:
    from ._writer import Writer

log = structlog.get_logger("store.leases")

LOCK_WAIT_S = 2.0
"""How long taking a lease waits for the thread's row on PostgreSQL (``_lock_row``)."""
STALLED_S = 10.0
"""A write transaction silent this long is a stalled writer's (``end_stalled``)."""


class Lease:
    """A held lease, as ``Leases.hold`` yields it. ``lost`` turns true when a renewal finds
    another owner; a holder that learns it otherwise (an append refused with ``LeaseLost``)
    may set it too. ``ending``/``released``: the holder's last write gives the lease up in its
    own transaction (``Store.finish``); a renewal that then finds it gone is not a loss, and
    ``hold`` has nothing left to release."""

    __slots__ = ("ending", "lost", "owner", "released", "thread_id")

    def __init__(self, thread_id: str, owner: str) -> None:
        self.thread_id = thread_id
        self.owner = owner
        self.lost = False
        self.ending = False
        self.released = False


def acquire(
    tx: Tx,
    thread_id: str,
    owner: str,
    *,
    ttl_s: float,
    replace: str | None,
    start: Status | None = None,
    expected: set[Status] | None = None,
) -> None:
    """``Leases.acquire`` inside its transaction."""
    now = _lock_row(tx, thread_id)
    taken = tx.execute(
        "UPDATE threads SET lease_owner = :owner, lease_expires_at = :expires WHERE id = :id"
        " AND (lease_owner IS NULL OR lease_owner = :owner OR lease_owner = :replace"
        " OR lease_expires_at < :now)",
        {
            "owner": owner,
            "expires": tx.time(now + timedelta(seconds=ttl_s)),
            "id": thread_id,
            "replace": replace or owner,
            "now": tx.time(now),
        },
    )
    if taken != 1:
        raise _held(_threads.get(tx, thread_id))
    if start is not None:  # the run's first status, in the lease's own transaction
        _threads.set_status(tx, thread_id, start, now=now, expected=expected, lease_owner=owner)


def _held(info: ThreadInfo) -> LeaseHeld:
    return LeaseHeld(
        f"{info.ref} is being run by {info.lease_owner} (lease until"
        f" {info.lease_expires_at:%H:%M:%S} UTC); wait for it or stop that process",
        info.lease_owner,
    )


def _lock_row(tx: Tx, thread_id: str) -> datetime:
    """Lock the thread's row for this transaction and return the time it was got: a lease runs
    from when it is taken, not from when it was asked for. (A taker that waited on the row and
    dated its lease from before the wait was born expired: its own first append was refused,
    "no longer holds the lease (held by <itself>)".) On PostgreSQL the wait is bounded
    (``LOCK_WAIT_S``): the row may be held by a host frozen in mid-transaction, until the
    server ends that session (``idle_in_transaction_session_timeout``), and this process's
    every write waits behind this one — so the taker gives way with ``LeaseHeld`` (owner
    ``None``: try again shortly). On SQLite the transaction's ``BEGIN IMMEDIATE`` already holds
    the database."""
    if tx.postgres:
        tx.execute(f"SET LOCAL lock_timeout = {int(LOCK_WAIT_S * 1000)}")
        try:
            tx.fetchone("SELECT id FROM threads WHERE id = :id FOR UPDATE", {"id": thread_id})
        except LockTimeout:
            raise _RowLocked(
                f"{format_ref(thread_id)}: its row stayed locked by another writer's open"
                f" transaction for {LOCK_WAIT_S:g} s (a host frozen mid-write?); try again",
                None,
            ) from None
    return utcnow()


class _RowLocked(LeaseHeld):
    """``_lock_row`` gave way: nobody holds the lease, a writer holds the row."""


def end_stalled(tx: Tx) -> list[int]:
    """End the sessions of this database that hold a write transaction (with a lock on the
    threads table) open while waiting on their client for more than ``STALLED_S`` (a host
    frozen or cut off mid-write: its row locks would stay until it came back). PostgreSQL's
    own ``idle_in_transaction_session_timeout`` misses a client stopped between the messages
    of one statement (the session is then ``active``, reading from the client); no
    transaction of ours waits on its client that long.
    Ending a session needs the same role (or ``pg_signal_backend``); without it, nothing."""
    found = tx.fetchall(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL"
        " AND wait_event = 'ClientRead' AND state_change < now() - make_interval(secs => :s)"
        # only a writer of ours: one holding a lock on the threads table itself
        " AND pid IN (SELECT l.pid FROM pg_locks l WHERE l.granted"
        " AND l.relation = to_regclass('threads'))",
        {"s": STALLED_S},
    )
    pids = [int(pid) for (pid,) in found]
    return [p for p in pids if tx.guarded("SELECT pg_terminate_backend(:p)", {"p": p})]


def renew(tx: Tx, thread_id: str, owner: str, ttl_s: float) -> bool:
    # dated inside the transaction, after any wait for this process's writer
    expires = tx.time(utcnow() + timedelta(seconds=ttl_s))
    return (
        tx.execute(
            "UPDATE threads SET lease_expires_at = :expires"
            " WHERE id = :id AND lease_owner = :owner",
            {"expires": expires, "id": thread_id, "owner": owner},
        )
        == 1
    )


release = _threads.release_lease


def abandon(tx: Tx, thread_id: str, owner: str, now: datetime) -> None:
    """Give up a lease whose holder stopped without writing its run's end (it was stopped
    before it began, or an error escaped the run): a thread it had moved to ``running`` is left
    ``interrupted``."""
    if release(tx, thread_id, owner) and _threads.get(tx, thread_id).status == Status.RUNNING:
        _threads.set_status(tx, thread_id, Status.INTERRUPTED, now=now, error="interrupted")


class Leases:
    """``store.leases``: acquire, renew, release, find stale ones, or ``hold`` one."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def acquire(
        self,
        thread_id: str,
        owner: str,
        *,
        ttl_s: float = 60.0,
        replace: str | None = None,
        start: Status | None = None,
        expected: set[Status] | None = None,
    ) -> None:
        """Make ``owner`` the one runner of the thread until the lease expires (renew it while
        running). Raises ``LeaseHeld`` when another owner holds a lease that has not expired —
        unless that owner is ``replace`` (a runner the caller knows is dead). ``start``: move
        the thread to that status in the same transaction (``StatusError`` takes nothing), and
        only from one of the ``expected`` statuses when given."""

        def take(tx: Tx) -> None:
            acquire(
                tx, thread_id, owner, ttl_s=ttl_s, replace=replace, start=start, expected=expected
            )

        try:
            await self._writer.run(take, where="acquiring a lease")
        except _RowLocked:
            ended = await self._writer.run(end_stalled, where="ending stalled writers")
            if not ended:
                raise
            log.warning("lease.stalled_writers_ended", thread=format_ref(thread_id), pids=ended)
            await self._writer.run(take, where="acquiring a lease")

    async def renew(self, thread_id: str, owner: str, *, ttl_s: float = 60.0) -> bool:
        """Extend the lease; False when ``owner`` no longer holds it."""
        return await self._writer.run(
            lambda tx: renew(tx, thread_id, owner, ttl_s), where="renewing a lease"
        )

    async def release(self, thread_id: str, owner: str) -> None:
        """Give the lease up; a no-op unless ``owner`` holds it."""
        await self._writer.run(lambda tx: release(tx, thread_id, owner), where="releasing a lease")

    async def stale(self) -> list[ThreadInfo]:
        """Threads whose runner's lease expired without being released (the runner died)."""
        now = utcnow()

        def fn(tx: Tx) -> list[ThreadInfo]:
            rows = tx.fetchall(
                _threads.SELECT + " WHERE lease_owner IS NOT NULL AND lease_expires_at < :now",
                {"now": tx.time(now)},
            )
            return [_threads.thread_from_row(r) for r in rows]

        return await self._writer.db.read(fn, where="finding stale leases")

    @contextlib.asynccontextmanager
    async def hold(
        self,
        thread_id: str,
        owner: str,
        *,
        ttl_s: float = 60.0,
        start: Status | None = None,
        expected: set[Status] | None = None,
    ) -> AsyncIterator[Lease]:
        """Hold the thread's lease for the block: acquired (taken over from an owner whose
        process is dead, ``owner_is_dead``; ``LeaseHeld`` when it lives), renewed every
        ``ttl_s / 3`` in the background, released on the way out whatever happens (a thread
        the block leaves ``running`` is then ``interrupted``: nobody runs it). When a
        renewal finds the lease gone, ``Lease.lost`` is set and the holding task is cancelled;
        that cancellation leaves the block as ``LeaseLost`` (a cancellation from anyone else
        stays a cancellation). ``start``: the status the thread takes with the lease (one
        transaction, ``acquire``), from one of the ``expected`` statuses when given
        (``StatusError`` otherwise, nothing taken)."""
        holder = asyncio.current_task()
        lease = Lease(thread_id, owner)
        renewer: asyncio.Task[None] | None = None
        try:
            # inside the try: a cancellation that lands just after the lease was written must
            # still release it (the write itself is finished even if we are cancelled)
            try:
                await self._take(thread_id, owner, ttl_s, start, expected)
            except asyncio.CancelledError:
                if start is not None:
                    # the take may have been written before the cancellation landed: the
                    # thread is then ``start`` under this lease and never ran — interrupted
                    with contextlib.suppress(Exception):
                        await finish_uncancelled(self._abandon(thread_id, owner))
                        lease.released = True
                raise
            renewer = asyncio.create_task(self._keep(lease, ttl_s, holder))
            try:
                yield lease
            except asyncio.CancelledError:
                # cancelled by the renewer because the lease was lost (and by nobody else)
                if lease.lost and holder is not None and holder.uncancel() == 0:
                    raise LeaseLost(
                        f"{format_ref(thread_id)}: {owner} lost its lease; the run stopped", None
                    ) from None
                raise
        finally:
            if renewer is not None:
                renewer.cancel()
                # waited for without swallowing a cancellation of the holder (it goes on up)
                await finish_uncancelled(asyncio.wait([renewer]))
            if not lease.released:
                # the block left without the run's last write (``Store.finish``): an error
                # escaped it, or the end itself could not be written. A thread left ``running``
                # with no lease would read ``running`` for ever with nobody running it: it is
                # left ``interrupted`` (resumable), as after a crash
                with contextlib.suppress(Exception):
                    await finish_uncancelled(self._abandon(thread_id, owner))

    async def _abandon(self, thread_id: str, owner: str) -> None:
        now = utcnow()
        await self._writer.run(
            lambda tx: abandon(tx, thread_id, owner, now), where="releasing a lease"
        )

    async def _take(
        self,
        thread_id: str,
        owner: str,
        ttl_s: float,
        start: Status | None = None,
        expected: set[Status] | None = None,
    ) -> None:
        try:
            await self.acquire(thread_id, owner, ttl_s=ttl_s, start=start, expected=expected)
        except LeaseHeld as held:
            if not owner_is_dead(held.owner):
                raise
            log.warning("lease.taken_over", thread=format_ref(thread_id), dead_owner=held.owner)
            await self.acquire(
                thread_id, owner, ttl_s=ttl_s, replace=held.owner, start=start, expected=expected
            )

    async def _keep(self, lease: Lease, ttl_s: float, holder: asyncio.Task[object] | None) -> None:
        """Renew until cancelled; when the lease cannot be renewed (another runner took it),
        mark it lost and cancel the holder: it must write nothing more."""
        while True:
            await asyncio.sleep(ttl_s / 3)
            try:
                held = await self.renew(lease.thread_id, lease.owner, ttl_s=ttl_s)
            except Exception as exc:  # the database hiccuped: try again; appends check the lease
                log.warning("lease.renew_failed", error=str(exc))
                continue
            if not held:
                if lease.ending:
                    return  # given up by the holder's last write, not taken from it
                log.warning("lease.lost", thread=format_ref(lease.thread_id))
                lease.lost = True
                if holder is not None:
                    holder.cancel()
                return
