"""Whose messages a thread shows: fork chains, their segments, and the fork-point rule.

A fork stores only its origin (thread, seq); its history is the origin's history up to that
seq, then its own messages. The plan to read a range is one: the chain (one recursive query,
then cached: it never changes), then one indexed select per segment (``segments``),
built into models without validating them again (``_stored``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from contextlib import closing
from datetime import datetime
from typing import NoReturn

from . import _threads
from ._sqlite import Later, Tx
from ._stored import CHUNK_ROWS, gc_paused, joined_chunk, segment_messages
from .errors import ForkPointError, StoreError, ThreadNotFound
from .models import Message, NewMessage, Status, ThreadInfo, ToolUseBlock
from .refs import format_ref

CHAIN_SQL = """
WITH RECURSIVE chain(id, parent, after, head, depth) AS (
    SELECT id, forked_from_id, COALESCE(forked_at_seq, 0), head_seq, 0 FROM threads WHERE id = :id
    UNION ALL
    SELECT t.id, t.forked_from_id, COALESCE(t.forked_at_seq, 0), t.head_seq, c.depth + 1
    FROM threads t JOIN chain c ON t.id = c.parent
)
SELECT id, after, head FROM chain ORDER BY depth
"""
"""A thread's ancestry, the thread first: (id, owns seqs after this, head_seq) per row."""


HEAD_SQL = "SELECT head_seq FROM threads WHERE id = :id"
"""A thread's head alone, for a reader that knows its ancestry already (it never changes)."""


HISTORY_SQL = (
    "SELECT content, role, created_at FROM messages"
    " WHERE thread_id = :owner AND seq BETWEEN :lo AND :hi ORDER BY seq"
)
"""One segment of a visible history (owner, lo, hi from ``segments``) as ``(content, role,
created_at)`` rows: the owner and the seqs
(``lo..hi``, every one of them stored) are the segment's (``_stored.segment_messages``)."""


JOINED_SEP = "\x1f"
"""What joins the roles and the timestamps of a ``JOINED_CHUNK_SQL`` row (neither holds it)."""


JOINED_CHUNK_SQL = (
    "SELECT count(*), '[' || coalesce(group_concat(content, ','), '') || ']',"
    f" group_concat(role, '{JOINED_SEP}'), group_concat(created_at, '{JOINED_SEP}')"
    " FROM (SELECT content, role, created_at FROM messages"
    " WHERE thread_id = :owner AND seq BETWEEN :lo AND :hi ORDER BY seq)"
)
"""``HISTORY_SQL``'s rows of a chunk of a segment as one row: (count, the contents as one JSON
array, the roles and the timestamps each joined by ``JOINED_SEP``), in seq order — the aggregate
reads its ordered subquery in order, which SQLite never flattens into an aggregate
(``_stored.joined_chunk``). SQLite makes the array, on the thread that fetches ahead."""


def segments(
    head: int, chain: Sequence[tuple[str, int]], start: int, end: int | None
) -> list[tuple[str, int, int]]:
    """Which rows hold messages ``start..end`` of a thread whose head is ``head`` and whose
    ancestry is ``chain`` ([(owner, owns seqs after this)…], the thread first): [(owner, lo, hi)]
    in seq order."""
    upper = head if end is None else min(end, head)
    out: list[tuple[str, int, int]] = []
    for owner, after in chain:
        lo = max(start, after + 1)
        if lo <= upper:
            out.append((owner, lo, upper))
        upper = min(upper, after)  # an ancestor's segment never reaches past ``end``
        if upper < start:
            break
    out.reverse()
    return out


Chain = list[tuple[str, int]]
"""[(owner, owns seqs after this)…], the thread itself first, up its fork ancestry."""

INLINE_ROWS = 200
"""A read of at most this many messages may run on the event loop's thread
(``Database.read(inline=True)``); a larger one goes to the reader's pool."""

INLINE_CHARS = 256 * 1024
"""…and of at most this much stored content: turning more into models happens in the pool, so
that one read never holds up the other tasks for long."""


class History:
    """Reads of visible histories; caches each thread's ancestry (it never changes)."""

    def __init__(self) -> None:
        self._ancestry: dict[str, Chain] = {}

    def chain(self, tx: Tx, thread_id: str) -> tuple[int, Chain]:
        """(head_seq, chain) of a thread: its ancestry in one recursive query, its head read
        with it — or, when the chain is known, its head alone (one primary-key lookup)."""
        chain = self._ancestry.get(thread_id)
        if chain is not None:
            row = tx.fetchone(HEAD_SQL, {"id": thread_id})
            if row is None:
                raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
            return int(row[0]), chain
        rows = tx.fetchall(CHAIN_SQL, {"id": thread_id})
        if not rows:
            raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
        chain = self._ancestry[thread_id] = [(str(r[0]), int(r[1])) for r in rows]
        return int(rows[0][2]), chain

    def read_range(
        self, tx: Tx, thread_id: str, start: int, end: int | None, *, small: bool = False
    ) -> list[Message]:
        """Messages ``start..end`` of the thread's visible history. ``small``: ``Later`` when
        they are more than ``INLINE_ROWS`` or ``INLINE_CHARS`` (a read on the event loop's
        thread goes to the pool instead). A long segment on SQLite is read ``CHUNK_ROWS``
        messages a row (``JOINED_CHUNK_SQL``), each chunk built as it comes while SQLite reads
        the next ones (``Tx.fetch_each``)."""
        head, chain = self.chain(tx, thread_id)
        segs = segments(head, chain, start, end)
        count = sum(hi - lo + 1 for _, lo, hi in segs)
        if small and count > INLINE_ROWS:
            raise Later
        out: list[Message] = []
        chars = 0
        with gc_paused(count):
            for owner, lo, hi in segs:
                if tx.postgres or hi - lo < CHUNK_ROWS:
                    rows = tx.fetchall(HISTORY_SQL, {"owner": owner, "lo": lo, "hi": hi})
                    if small:
                        chars += sum([len(r[0]) for r in rows])
                        if chars > INLINE_CHARS:
                            raise Later
                    if len(rows) != hi - lo + 1:
                        _missing(owner, lo, hi, len(rows))
                    out.extend(segment_messages(owner, lo, rows))
                    continue
                chunks = [(a, min(a + CHUNK_ROWS - 1, hi)) for a in range(lo, hi + 1, CHUNK_ROWS)]
                params = [{"owner": owner, "lo": a, "hi": b} for a, b in chunks]
                with closing(tx.fetch_each(JOINED_CHUNK_SQL, params)) as fetched:
                    for (first, last), row in zip(chunks, fetched, strict=True):
                        assert row is not None  # an aggregate: always one row
                        if row[0] != last - first + 1:
                            _missing(owner, first, last, row[0])
                        try:
                            joined_chunk(owner, first, row, JOINED_SEP, out)
                        except ValueError as err:
                            raise StoreError(
                                f"{format_ref(owner)}: stored messages #{first}-{last} cannot"
                                f" be read: {err}"
                            ) from err
        return out

    def ancestry(self, tx: Tx, thread_id: str) -> list[tuple[str, int]]:
        """``Store.ancestry``: [(thread, head), (parent, fork point), …]."""
        head, chain = self.chain(tx, thread_id)
        out = [(chain[0][0], head)]
        for (_, after), (owner, _) in itertools.pairwise(chain):
            out.append((owner, after))
        return out

    def fork(
        self,
        tx: Tx,
        source_id: str,
        *,
        at: int | None,
        fork_id: str,
        now: datetime,
        title: str | None,
        parent_id: str | None,
        status: Status,
        messages: Sequence[NewMessage],
        source_key: str | None = None,
        model: str | None = None,
    ) -> ThreadInfo:
        """``Store.fork`` inside its transaction: the fork point checked, one thread row."""
        src = _threads.get(tx, source_id)
        point = self._fork_point(tx, src, at)
        from . import _messages  # the write statements: the read-only fast path never forks

        _messages.new_thread(
            tx,
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
            model=model or src.model,
            source_key=source_key,
        )
        return _threads.get(tx, fork_id)

    def _fork_point(self, tx: Tx, src: ThreadInfo, at: int | None) -> int:
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
        msgs = self.read_range(tx, src.id, point, min(point + 1, src.head_seq))
        if at is None and len(msgs) == 1 and point > 1 and _has_tool_use(msgs[0]):
            # the default end of a thread that is mid-turn (running, or interrupted with
            # its calls unanswered): fork at the last turn boundary, before those calls
            point -= 1
            msgs = self.read_range(tx, src.id, point, point + 1)
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


def _missing(owner: str, lo: int, hi: int, found: int) -> NoReturn:
    raise StoreError(
        f"{format_ref(owner)}: {found} stored messages in #{lo}-{hi}, expected {hi - lo + 1}"
    )


def _has_tool_use(message: Message) -> bool:
    return any(isinstance(b, ToolUseBlock) for b in message.content)
