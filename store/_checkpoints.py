"""Checkpoints (``store.checkpoints``): the thread's files after message ``seq`` are ``commit``
(an opaque string to the store; the orchestrator's git commits). A fork's files at an inherited
message are its parent's, so lookups walk the fork ancestry (``_history``)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from . import _threads
from ._sqlite import Tx, utcnow

if TYPE_CHECKING:  # the store's own, lent: importing it here would stack the store deeper
    from ._history import History
    from ._writer import Writer

_KEY = "thread_id = :thread AND seq = :seq"


def record(tx: Tx, thread_id: str, seq: int, commit: str, now: datetime) -> None:
    _threads.get(tx, thread_id)
    params = {"thread": thread_id, "seq": seq, "commit": commit, "now": tx.time(now)}
    tx.execute(f"DELETE FROM checkpoints WHERE {_KEY}", params)
    tx.execute(
        'INSERT INTO checkpoints (thread_id, seq, "commit", created_at)'
        " VALUES (:thread, :seq, :commit, :now)",
        params,
    )


def at(tx: Tx, history: History, thread_id: str, seq: int | None) -> tuple[int, str] | None:
    head, chain = history.chain(tx, thread_id)
    limit = head if seq is None else min(seq, head)
    bounds = [head] + [after for _, after in chain[:-1]]
    for (owner, _), bound in zip(chain, bounds, strict=True):
        limit = min(limit, bound)
        row = tx.fetchone(
            'SELECT seq, "commit" FROM checkpoints WHERE thread_id = :thread AND seq <= :seq'
            " ORDER BY seq DESC LIMIT 1",
            {"thread": owner, "seq": limit},
        )
        if row is not None:
            return int(row[0]), str(row[1])
    return None


def own(tx: Tx, thread_id: str) -> list[tuple[int, str]]:
    rows = tx.fetchall(
        'SELECT seq, "commit" FROM checkpoints WHERE thread_id = :thread ORDER BY seq',
        {"thread": thread_id},
    )
    return [(int(r[0]), str(r[1])) for r in rows]


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
            lambda tx: record(tx, thread_id, seq, commit, now), where="recording a checkpoint"
        )

    async def at(self, thread_id: str, seq: int | None = None) -> tuple[int, str] | None:
        """The checkpoint in force at message ``seq`` of the thread (default: its end): the
        newest one at or before ``seq``, found along the fork ancestry — a fork's files at
        message n are its parent's at n when n is an inherited message. None when no message up
        to ``seq`` changed files."""
        return await self._writer.db.read(
            lambda tx: at(tx, self._history, thread_id, seq), where="reading checkpoints"
        )

    async def of_thread(self, thread_id: str) -> list[tuple[int, str]]:
        """The thread's own checkpoints (not its fork ancestry's), oldest first."""
        return await self._writer.db.read(
            lambda tx: own(tx, thread_id), where="reading checkpoints"
        )
