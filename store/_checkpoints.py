"""Checkpoints (``store.checkpoints``): the thread's files after message ``seq`` are ``commit``
(an opaque string to the store; the orchestrator's git commits). A fork's files at an inherited
message are its parent's, so lookups walk the fork ancestry (``_history``)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from . import _threads
from ._engine import utcnow
from ._history import History
from ._tables import checkpoints

if TYPE_CHECKING:
    from ._writer import Writer


async def _record(
    conn: AsyncConnection, thread_id: str, seq: int, commit: str, now: datetime
) -> None:
    await _threads.get(conn, thread_id)
    await conn.execute(
        checkpoints.delete().where(checkpoints.c.thread_id == thread_id, checkpoints.c.seq == seq)
    )
    await conn.execute(
        checkpoints.insert().values(thread_id=thread_id, seq=seq, commit=commit, created_at=now)
    )


async def _at(
    conn: AsyncConnection, history: History, thread_id: str, seq: int | None
) -> tuple[int, str] | None:
    head, chain = await history.chain(conn, thread_id)
    limit = head if seq is None else min(seq, head)
    bounds = [head] + [after for _, after in chain[:-1]]
    for (owner, _), bound in zip(chain, bounds, strict=True):
        limit = min(limit, bound)
        row = (
            await conn.execute(
                sa.select(checkpoints.c.seq, checkpoints.c.commit)
                .where(checkpoints.c.thread_id == owner, checkpoints.c.seq <= limit)
                .order_by(checkpoints.c.seq.desc())
                .limit(1)
            )
        ).first()
        if row is not None:
            return int(row.seq), str(row.commit)
    return None


async def _own(conn: AsyncConnection, thread_id: str) -> list[tuple[int, str]]:
    q = (
        sa.select(checkpoints.c.seq, checkpoints.c.commit)
        .where(checkpoints.c.thread_id == thread_id)
        .order_by(checkpoints.c.seq)
    )
    return [(int(r.seq), str(r.commit)) for r in await conn.execute(q)]


class Checkpoints:
    """``store.checkpoints``: record one, find the one in force, list a thread's own."""

    def __init__(self, writer: Writer, history: History) -> None:
        self._writer = writer
        self._history = history

    async def record(self, thread_id: str, seq: int, commit: str) -> None:
        """Record that the thread's files after message ``seq`` are ``commit``. Recording the
        same seq again replaces it: a replayed step checkpoints the files as they are now."""
        now = utcnow()
        await self._writer.run(
            lambda c: _record(c, thread_id, seq, commit, now), where="recording a checkpoint"
        )

    async def at(self, thread_id: str, seq: int | None = None) -> tuple[int, str] | None:
        """The checkpoint in force at message ``seq`` of the thread (default: its end): the
        newest one at or before ``seq``, found along the fork ancestry — a fork's files at
        message n are its parent's at n when n is an inherited message. None when no message up
        to ``seq`` changed files."""
        return await self._writer.db.read(
            lambda c: _at(c, self._history, thread_id, seq), where="reading checkpoints"
        )

    async def of_thread(self, thread_id: str) -> list[tuple[int, str]]:
        """The thread's own checkpoints (not its fork ancestry's), oldest first."""
        return await self._writer.db.read(lambda c: _own(c, thread_id), where="reading checkpoints")
