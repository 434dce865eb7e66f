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

import sqlalchemy as sa
import structlog
from sqlalchemy.ext.asyncio import AsyncConnection

from . import _threads
from ._engine import finish_uncancelled, utcnow
from ._liveness import owner_is_dead
from ._tables import threads
from .errors import LeaseHeld, LeaseLost
from .models import ThreadInfo
from .refs import format_ref

if TYPE_CHECKING:
    from ._writer import Writer

log = structlog.get_logger("store.leases")


class Lease:
    """A held lease, as ``Leases.hold`` yields it. ``lost`` turns true when a renewal finds
    another owner; a holder that learns it otherwise (an append refused with ``LeaseLost``)
    may set it too."""

    __slots__ = ("lost", "owner", "thread_id")

    def __init__(self, thread_id: str, owner: str) -> None:
        self.thread_id = thread_id
        self.owner = owner
        self.lost = False


async def _acquire(
    conn: AsyncConnection,
    thread_id: str,
    owner: str,
    *,
    now: datetime,
    ttl_s: float,
    replace: str | None,
) -> None:
    res = await conn.execute(
        threads.update()
        .where(
            threads.c.id == thread_id,
            sa.or_(
                threads.c.lease_owner.is_(None),
                threads.c.lease_owner == owner,
                threads.c.lease_owner == (replace or owner),
                threads.c.lease_expires_at < now,
            ),
        )
        .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=ttl_s))
    )
    if res.rowcount == 1:
        return
    info = await _threads.get(conn, thread_id)
    raise LeaseHeld(
        f"{info.ref} is being run by {info.lease_owner} (lease until"
        f" {info.lease_expires_at:%H:%M:%S} UTC); wait for it or stop that process",
        info.lease_owner,
    )


async def _renew(conn: AsyncConnection, thread_id: str, owner: str, expires: datetime) -> bool:
    res = await conn.execute(
        threads.update()
        .where(threads.c.id == thread_id, threads.c.lease_owner == owner)
        .values(lease_expires_at=expires)
    )
    return bool(res.rowcount == 1)


async def _release(conn: AsyncConnection, thread_id: str, owner: str) -> None:
    await conn.execute(
        threads.update()
        .where(threads.c.id == thread_id, threads.c.lease_owner == owner)
        .values(lease_owner=None, lease_expires_at=None)
    )


class Leases:
    """``store.leases``: acquire, renew, release, find stale ones, or ``hold`` one."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def acquire(
        self, thread_id: str, owner: str, *, ttl_s: float = 60.0, replace: str | None = None
    ) -> None:
        """Make ``owner`` the one runner of the thread until the lease expires (renew it while
        running). Raises ``LeaseHeld`` when another owner holds a lease that has not expired —
        unless that owner is ``replace`` (a runner the caller knows is dead)."""
        now = utcnow()
        await self._writer.run(
            lambda c: _acquire(c, thread_id, owner, now=now, ttl_s=ttl_s, replace=replace),
            where="acquiring a lease",
        )

    async def renew(self, thread_id: str, owner: str, *, ttl_s: float = 60.0) -> bool:
        """Extend the lease; False when ``owner`` no longer holds it."""
        expires = utcnow() + timedelta(seconds=ttl_s)
        return await self._writer.run(
            lambda c: _renew(c, thread_id, owner, expires), where="renewing a lease"
        )

    async def release(self, thread_id: str, owner: str) -> None:
        """Give the lease up; a no-op unless ``owner`` holds it."""
        await self._writer.run(lambda c: _release(c, thread_id, owner), where="releasing a lease")

    async def stale(self) -> list[ThreadInfo]:
        """Threads whose runner's lease expired without being released (the runner died)."""
        q = sa.select(*_threads.THREAD_COLUMNS).where(
            threads.c.lease_owner.is_not(None), threads.c.lease_expires_at < utcnow()
        )
        return await self._writer.db.read(
            lambda c: _threads.rows(c, q), where="finding stale leases"
        )

    @contextlib.asynccontextmanager
    async def hold(
        self, thread_id: str, owner: str, *, ttl_s: float = 60.0
    ) -> AsyncIterator[Lease]:
        """Hold the thread's lease for the block: acquired (taken over from an owner whose
        process is dead, ``owner_is_dead``; ``LeaseHeld`` when it lives), renewed every
        ``ttl_s / 3`` in the background, released on the way out whatever happens. When a
        renewal finds the lease gone, ``Lease.lost`` is set and the holding task is cancelled;
        that cancellation leaves the block as ``LeaseLost`` (a cancellation from anyone else
        stays a cancellation)."""
        holder = asyncio.current_task()
        lease = Lease(thread_id, owner)
        renewer: asyncio.Task[None] | None = None
        try:
            # inside the try: a cancellation that lands just after the lease was written must
            # still release it (the write itself is finished even if we are cancelled)
            await self._take(thread_id, owner, ttl_s)
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
            with contextlib.suppress(Exception):
                await finish_uncancelled(self.release(thread_id, owner))

    async def _take(self, thread_id: str, owner: str, ttl_s: float) -> None:
        try:
            await self.acquire(thread_id, owner, ttl_s=ttl_s)
        except LeaseHeld as held:
            if not owner_is_dead(held.owner):
                raise
            log.warning("lease.taken_over", thread=format_ref(thread_id), dead_owner=held.owner)
            await self.acquire(thread_id, owner, ttl_s=ttl_s, replace=held.owner)

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
                log.warning("lease.lost", thread=format_ref(lease.thread_id))
                lease.lost = True
                if holder is not None:
                    holder.cancel()
                return
