"""Whose messages a thread shows: fork chains, their segments, and the fork-point rule.

A fork stores only its origin (thread, seq); its history is the origin's history up to that
seq, then its own messages. The plan to read a range — the chain, then one indexed select per
segment (``_readsql.segments``) — is one, whether it runs through SQLAlchemy (``read_range``)
or a plain ``sqlite3`` connection (``raw_messages``, small reads on the loop's own thread;
and the fast path ``_rawread``, which shares ``_readsql`` without importing SQLAlchemy).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from . import _threads
from ._engine import RawSqliteReader
from ._readsql import (
    CHAIN_SQL,
    HEAD_SQL,
    HISTORY_SQL,
    JOINED_CHUNK_SQL,
    JOINED_SEP,
    segments,
)
from ._stored import CHUNK_ROWS, gc_paused, joined_chunk, segment_messages
from ._tables import messages, threads
from .errors import ForkPointError, StoreError, ThreadNotFound
from .models import Message, NewMessage, Status, ThreadInfo, ToolUseBlock
from .refs import format_ref

Chain = list[tuple[str, int]]
"""[(owner, owns seqs after this)…], the thread itself first, up its fork ancestry."""


class History:
    """Reads of visible histories; caches each thread's ancestry (it never changes)."""

    def __init__(self) -> None:
        self._ancestry: dict[str, Chain] = {}

    async def chain(self, conn: AsyncConnection, thread_id: str) -> tuple[int, Chain]:
        """(head_seq, chain) of a thread; the head is read every time."""
        row = (
            await conn.execute(
                sa.select(
                    threads.c.head_seq, threads.c.forked_from_id, threads.c.forked_at_seq
                ).where(threads.c.id == thread_id)
            )
        ).first()
        if row is None:
            raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
        chain = self._ancestry.get(thread_id)
        if chain is None:
            chain = [(thread_id, int(row.forked_at_seq or 0))]
            parent = row.forked_from_id
            while parent is not None:
                prow = (
                    await conn.execute(
                        sa.select(threads.c.forked_from_id, threads.c.forked_at_seq).where(
                            threads.c.id == parent
                        )
                    )
                ).one()
                chain.append((parent, int(prow.forked_at_seq or 0)))
                parent = prow.forked_from_id
            self._ancestry[thread_id] = chain
        return int(row.head_seq), chain

    async def read_range(
        self, conn: AsyncConnection, thread_id: str, start: int, end: int | None
    ) -> list[Message]:
        head, chain = await self.chain(conn, thread_id)
        out: list[Message] = []
        for owner, lo, hi in segments(head, chain, start, end):
            rows = await conn.execute(
                sa.select(*HISTORY_COLUMNS)
                .where(messages.c.thread_id == owner, messages.c.seq.between(lo, hi))
                .order_by(messages.c.seq)
            )
            out.extend(segment(owner, lo, hi, rows.all()))
        return out

    async def ancestry(self, conn: AsyncConnection, thread_id: str) -> list[tuple[str, int]]:
        """``Store.ancestry``: [(thread, head), (parent, fork point), …]."""
        head, chain = await self.chain(conn, thread_id)
        out = [(chain[0][0], head)]
        for (_, after), (owner, _) in itertools.pairwise(chain):
            out.append((owner, after))
        return out

    async def fork(
        self,
        conn: AsyncConnection,
        source_id: str,
        *,
        at: int | None,
        fork_id: str,
        now: datetime,
        title: str | None,
        parent_id: str | None,
        status: Status,
        messages: Sequence[NewMessage],
    ) -> ThreadInfo:
        """``Store.fork`` inside its transaction: the fork point checked, one thread row."""
        src = await _threads.get(conn, source_id)
        point = await self._fork_point(conn, src, at)
        await _threads.insert(
            conn,
            now,
            messages,
            after_seq=point,
            id=fork_id,
            kind=str(src.kind),
            title=title if title is not None else (f"fork of {src.title}" if src.title else "fork"),
            status=str(status),
            parent_id=parent_id,
            forked_from_id=src.id,
            forked_at_seq=point,
            job_id=src.job_id,
            task=src.task,
            system_prompt=src.system_prompt,
            tools=list(src.tools),
            model=src.model,
        )
        return await _threads.get(conn, fork_id)

    async def _fork_point(self, conn: AsyncConnection, src: ThreadInfo, at: int | None) -> int:
        """The fork-point rule: a point inside the thread, never between a tool_use and its
        result (the error names the nearest valid points). The default end of a thread that is
        mid-turn is its last turn boundary, before the unanswered calls."""
        point = src.head_seq if at is None else at
        if point < 1 or point > src.head_seq:
            raise ForkPointError(
                f"cannot fork {src.ref} at #{point}: it has messages 1..{src.head_seq}"
            )
        if point == src.head_seq and not src.head_seq:
            raise ForkPointError(f"cannot fork {src.ref}: it has no messages")
        msgs = await self.read_range(conn, src.id, point, min(point + 1, src.head_seq))
        if at is None and len(msgs) == 1 and point > 1 and _has_tool_use(msgs[0]):
            # the default end of a thread that is mid-turn (running, or interrupted with
            # its calls unanswered): fork at the last turn boundary, before those calls
            point -= 1
            msgs = await self.read_range(conn, src.id, point, point + 1)
        at_msg = msgs[0]
        if _has_tool_use(at_msg) and len(msgs) == 1:
            hint = f"; the nearest valid point is #{point - 1}" if point > 1 else ""
            raise ForkPointError(
                f"cannot fork {src.ref} at #{point}: message {point} has tool calls that are"
                f" not answered yet (the thread is mid-turn){hint}"
            )
        if _has_tool_use(at_msg):
            valid = [str(point - 1)] if point > 1 else []
            if len(msgs) > 1:
                valid.append(str(point + 1))
            hint = f"; the nearest valid points are #{' and #'.join(valid)}" if valid else ""
            raise ForkPointError(
                f"cannot fork {src.ref} at #{point}: message {point} has tool calls whose"
                f" results are in #{point + 1}{hint}"
            )
        return point


INLINE_ROWS = 200
"""A raw read of at most this many messages runs on the event loop's thread
(``RawSqliteReader.inline``); a larger one in the reader's pool."""

INLINE_CHARS = 256 * 1024
"""…and of at most this much stored content: turning more into models happens in the pool, so
that one read never holds up the other tasks for long."""

HISTORY_COLUMNS = (messages.c.content, messages.c.role, messages.c.created_at)
"""``_readsql.HISTORY_SQL``'s columns, for the SQLAlchemy read."""

Rows = list[tuple[str, int, int, list[Any]]]
"""The rows of each segment: [(owner, lo, hi, rows of ``HISTORY_SQL``)…] in seq order."""


def segment(owner: str, lo: int, hi: int, rows: Sequence[Sequence[Any]]) -> list[Message]:
    """Messages ``lo..hi`` of ``owner`` from its ``HISTORY_SQL`` rows: every seq of a segment is
    stored (``segments`` never reaches past a head), so the rows are those seqs in order."""
    if len(rows) != hi - lo + 1:
        _missing(owner, lo, hi, len(rows))
    return segment_messages(owner, lo, rows)


def _missing(owner: str, lo: int, hi: int, found: int) -> NoReturn:
    raise StoreError(
        f"{format_ref(owner)}: {found} stored messages in #{lo}-{hi}, expected {hi - lo + 1}"
    )


def from_rows(segment_rows: Rows) -> list[Message]:
    out: list[Message] = []
    for owner, lo, hi, rows in segment_rows:
        out.extend(segment(owner, lo, hi, rows))
    return out


async def raw_messages(
    raw: RawSqliteReader,
    thread_id: str,
    start: int,
    end: int | None,
    history: History | None = None,
) -> list[Message]:
    """``Store.messages`` on SQLite. The segments and the rows of a small range are read at once
    on the loop's thread: for the last page of a thread the hop to the pool and back cost more
    than the reads (``bench_store.py``'s ``read``). Many rows, much text, or a busy database go
    to the pool. The messages are the same either way: the head is read first, and messages are
    append-only. ``history`` (the store's) lends its cache of ancestries: then a thread read
    before costs one primary-key lookup of its head, not the walk up its chain."""
    where = "reading messages"
    ancestry = history._ancestry if history is not None else {}
    small = raw.inline(lambda c: _inline_read(c, ancestry, thread_id, start, end), where=where)
    if small is None:  # busy: all of it in the pool
        return await raw.run(
            lambda c: raw_read(c, raw_segments(c, thread_id, start, end, ancestry)), where=where
        )
    segs, rows = small
    if rows is not None:
        return from_rows(rows)
    return await raw.run(lambda c: raw_read(c, segs), where=where)


def _inline_read(
    conn: sqlite3.Connection,
    ancestry: dict[str, Chain],
    thread_id: str,
    start: int,
    end: int | None,
) -> tuple[list[tuple[str, int, int]], Rows | None]:
    """The segments of a read, and their rows when they are few and small enough to be built on
    the loop's thread (``INLINE_ROWS``, ``INLINE_CHARS``), else None."""
    segs = raw_segments(conn, thread_id, start, end, ancestry)
    if sum(hi - lo + 1 for _, lo, hi in segs) > INLINE_ROWS:
        return segs, None
    rows = raw_rows(conn, segs)
    if sum([len(r[0]) for *_, rs in rows for r in rs]) > INLINE_CHARS:
        return segs, None
    return segs, rows


def raw_segments(
    conn: sqlite3.Connection,
    thread_id: str,
    start: int,
    end: int | None,
    ancestry: dict[str, Chain] | None = None,
) -> list[tuple[str, int, int]]:
    """The segments (owner, lo, hi) holding messages ``start..end`` of a thread: its ancestry
    in one recursive query, its head read with it — or, when ``ancestry`` knows the thread's
    chain, its head alone."""
    chain = None if ancestry is None else ancestry.get(thread_id)
    if chain is not None:
        row = conn.execute(HEAD_SQL, (thread_id,)).fetchone()
        if row is None:
            raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
        return segments(int(row[0]), chain, start, end)
    chain_rows = conn.execute(CHAIN_SQL, (thread_id,)).fetchall()
    if not chain_rows:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    chain = [(str(r[0]), int(r[1])) for r in chain_rows]
    if ancestry is not None:
        ancestry[thread_id] = chain
    return segments(int(chain_rows[0][2]), chain, start, end)


def raw_rows(conn: sqlite3.Connection, segs: list[tuple[str, int, int]]) -> Rows:
    """The rows of each segment of ``segs``: one indexed select per segment."""
    return [
        (owner, lo, hi, conn.execute(HISTORY_SQL, (owner, lo, hi)).fetchall())
        for owner, lo, hi in segs
    ]


def raw_read(conn: sqlite3.Connection, segs: list[tuple[str, int, int]]) -> list[Message]:
    """The messages of ``segs``, read and built with the collector paused when they are many
    (``_stored.gc_paused``: the rows are as many containers as the models). A long segment is
    read ``CHUNK_ROWS`` messages a row (``JOINED_CHUNK_SQL``), each chunk built as it comes."""
    out: list[Message] = []
    with gc_paused(sum(hi - lo + 1 for _, lo, hi in segs)):
        for owner, lo, hi in segs:
            if hi - lo < CHUNK_ROWS:
                rows = conn.execute(HISTORY_SQL, (owner, lo, hi)).fetchall()
                out.extend(segment(owner, lo, hi, rows))
                continue
            for first in range(lo, hi + 1, CHUNK_ROWS):
                last = min(first + CHUNK_ROWS - 1, hi)
                row = conn.execute(JOINED_CHUNK_SQL, (owner, first, last)).fetchone()
                if row[0] != last - first + 1:
                    _missing(owner, first, last, row[0])
                try:
                    joined_chunk(owner, first, row, JOINED_SEP, out)
                except ValueError as err:
                    raise StoreError(
                        f"{format_ref(owner)}: stored messages #{first}-{last} cannot be"
                        f" read: {err}"
                    ) from err
    return out


def raw_read_range(
    conn: sqlite3.Connection, thread_id: str, start: int, end: int | None
) -> list[Message]:
    """``Store.messages`` on SQLite in one call on a plain sqlite3 connection (the read path's
    hot spot is SQLAlchemy's async machinery, not SQLite)."""
    return raw_read(conn, raw_segments(conn, thread_id, start, end))


def _has_tool_use(message: Message) -> bool:
    return any(isinstance(b, ToolUseBlock) for b in message.content)
