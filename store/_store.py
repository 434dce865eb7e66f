"""The async store: the API everything above ``store`` uses.

Writes are serialised through one writer per process. Appends are group-committed: appends that
arrive while a transaction is running are validated and written together in the next one (one
``BEGIN IMMEDIATE``, one multi-row insert per table), and each caller's await returns only after
the transaction holding its messages has committed. Other writes run one transaction each.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from . import _outputs, _search
from ._engine import Database, finish_uncancelled, utcnow
from ._invariants import check_append
from ._liveness import as_seen
from ._outputs import OutputFile
from ._readsql import CHAIN_SQL, MESSAGES_SQL, segments
from ._rows import (
    MESSAGE_COLUMNS,
    THREAD_COLUMNS,
    messages_from_rows,
    thread_from_row,
)
from ._tables import checkpoints, dispatches, messages, threads, usage
from .errors import (
    AmbiguousRef,
    ForkPointError,
    InvariantError,
    LeaseHeld,
    LeaseLost,
    StatusError,
    StoreError,
    ThreadNotFound,
)
from .models import (
    Kind,
    Message,
    NewMessage,
    Result,
    SearchHit,
    Status,
    ThreadInfo,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageRecord,
)
from .refs import ThreadRef, format_ref, is_full_id, new_id

T = TypeVar("T")

_ALLOWED: dict[Status, frozenset[Status]] = {
    Status.IDLE: frozenset({Status.QUEUED, Status.RUNNING, Status.CANCELLED}),
    Status.QUEUED: frozenset({Status.RUNNING, Status.CANCELLED, Status.INTERRUPTED, Status.FAILED}),
    Status.RUNNING: frozenset({Status.DONE, Status.FAILED, Status.INTERRUPTED, Status.CANCELLED}),
}
for _terminal in (Status.DONE, Status.FAILED, Status.INTERRUPTED, Status.CANCELLED):
    # a finished thread can be resumed
    _ALLOWED[_terminal] = frozenset({Status.QUEUED, Status.RUNNING})


@dataclass(slots=True)
class _PendingAppend:
    thread_id: str
    messages: Sequence[NewMessage]
    usage: UsageRecord | None
    future: asyncio.Future[list[Message]]
    lease_owner: str | None = None
    files: Mapping[str, OutputFile] | None = None


def id_prefix_condition(
    column: sa.ColumnElement[str], prefix: str, dialect: str
) -> sa.ColumnElement[bool]:
    """``column`` starts with ``prefix``, whatever the database's collation.

    A half-open range ``[prefix, prefix with its last character incremented)`` compared byte by
    byte: SQLite compares our columns with BINARY (so its primary-key index still serves the
    range); on PostgreSQL the comparison is made ``COLLATE "C"``, since under a linguistic
    collation (ICU en-US, en_US.UTF-8) neither ``'~'`` nor any other character is guaranteed to
    sort after every id character (``id < p || '~'`` matched nothing there)."""
    if not prefix:
        return sa.true()
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    col = column.collate("C") if dialect == "postgresql" else column
    return sa.and_(col >= prefix, col < upper)


@dataclass(frozen=True, slots=True)
class ResolvedRef:
    """A ref resolved to its thread; ``start``/``end`` are clamped to the thread's messages."""

    thread: ThreadInfo
    start: int | None
    end: int | None

    @property
    def ref(self) -> str:
        return format_ref(self.thread.id, self.start, self.end)


@dataclass(frozen=True, slots=True)
class UsageTotal:
    thread_id: str
    usage: Usage
    cost_usd: float
    responses: int


@dataclass(frozen=True, slots=True)
class Dispatch:
    lead_id: str
    tool_use_id: str
    task_index: int
    task_key: str | None
    worker_id: str
    status: str


@dataclass(slots=True)
class _Ancestry:
    """Immutable fork ancestry of a thread: [(thread_id, owns messages after this seq)]."""

    chain: list[tuple[str, int]] = field(default_factory=list)


class Store:
    """Threads persisted as they happen. Open with ``await Store.open(url)`` or
    ``async with await Store.open(url) as store`` (the schema is upgraded to head on open)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = asyncio.Lock()
        self._pending: list[_PendingAppend] = []
        self._ancestry: dict[str, list[tuple[str, int]]] = {}

    @classmethod
    async def open(
        cls, url: str, *, create_dirs: bool = False, migrate: bool = True, synchronous: str = "FULL"
    ) -> Store:
        db = Database(url, create_dirs=create_dirs, synchronous=synchronous)
        try:
            if migrate:
                await db.migrate()
        except BaseException:
            await db.dispose()
            raise
        return cls(db)

    async def close(self) -> None:
        await self.db.dispose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- write plumbing

    async def _write(self, fn: Callable[[AsyncConnection], Awaitable[T]], *, where: str) -> T:
        """One write transaction, serialised with every other write of this process, finished
        even if the caller is cancelled once it has started."""
        async with self._lock:
            return await finish_uncancelled(self.db.write(fn, where=where))

    # ----------------------------------------------------------------- threads

    async def create_thread(
        self,
        *,
        kind: Kind | str,
        title: str = "",
        parent_id: str | None = None,
        job_id: str | None = None,
        task: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        tools: Sequence[str] = (),
        model: str | None = None,
        status: Status = Status.IDLE,
        messages: Sequence[NewMessage] = (),
        thread_id: str | None = None,
    ) -> ThreadInfo:
        """A new thread (a root of its own job unless ``job_id``/``parent_id`` say otherwise),
        with ``messages`` appended in the same transaction."""
        tid = thread_id or new_id()
        check_append((), 0, messages)  # refuse bad messages before touching the database
        now = utcnow()

        async def fn(conn: AsyncConnection) -> ThreadInfo:
            job = job_id
            if job is None and parent_id is not None:
                job = await self._job_of(conn, parent_id)
            await self._insert_thread(
                conn,
                now,
                messages,
                id=tid,
                kind=str(Kind(kind)),
                title=title,
                status=str(status),
                parent_id=parent_id,
                job_id=job or tid,
                task=task,
                system_prompt=system_prompt,
                tools=list(tools),
                model=model,
            )
            return await self._thread(conn, tid)

        return await self._write(fn, where="creating a thread")

    async def _insert_thread(
        self,
        conn: AsyncConnection,
        now: Any,
        messages: Sequence[NewMessage],
        *,
        after_seq: int = 0,
        **values: Any,
    ) -> None:
        """One thread row (its history starting after ``after_seq``: a fork's point) and its
        first ``messages``, validated against the pairing invariant before anything is written."""
        pending = check_append((), after_seq, messages)
        await conn.execute(
            threads.insert().values(
                **values,
                version=1,
                head_seq=after_seq + len(messages),
                pending_tool_ids=list(pending),
                created_at=now,
                updated_at=now,
            )
        )
        await self._insert_messages(conn, values["id"], after_seq + 1, messages, now)

    async def _job_of(self, conn: AsyncConnection, thread_id: str) -> str:
        row = (
            await conn.execute(sa.select(threads.c.job_id).where(threads.c.id == thread_id))
        ).first()
        if row is None:
            raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
        return str(row[0])

    async def _insert_messages(
        self,
        conn: AsyncConnection,
        thread_id: str,
        first_seq: int,
        msgs: Sequence[NewMessage],
        now: Any,
    ) -> list[Message]:
        if _outputs.needs_apart(msgs, None):
            msgs = await _outputs.store_apart(conn, thread_id, first_seq, msgs, None)
        rows, out = _message_rows(thread_id, first_seq, msgs, now)
        if rows:
            await self._insert_message_rows(conn, rows)
        return out

    @staticmethod
    async def _insert_message_rows(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        await conn.execute(
            messages.insert(), [{k: v for k, v in r.items() if k != "_text"} for r in rows]
        )
        await conn.execute(_search.INSERT, _search.index_rows(rows))

    async def _thread(self, conn: AsyncConnection, thread_id: str) -> ThreadInfo:
        row = (
            await conn.execute(sa.select(*THREAD_COLUMNS).where(threads.c.id == thread_id))
        ).first()
        if row is None:
            raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
        return thread_from_row(row)

    async def get_thread(self, thread_id: str) -> ThreadInfo:
        """The thread as readers see it: ``running`` with its runner gone reads ``interrupted``
        (``_liveness``); transactions use ``_thread``, the stored row as it is."""
        info = await self.db.read(lambda c: self._thread(c, thread_id), where="reading a thread")
        return as_seen(info)

    # ----------------------------------------------------------------- appends (group commit)

    async def append(
        self,
        thread_id: str,
        msgs: Sequence[NewMessage] | NewMessage,
        *,
        usage: UsageRecord | None = None,
        lease_owner: str | None = None,
        output_files: Mapping[str, OutputFile] | None = None,
    ) -> list[Message]:
        """Append messages (numbered after the thread's head) in one transaction, with the
        usage row of the model response that produced them. Returns the stored messages once
        committed. A tool result longer than ``INLINE_LIMIT`` characters, or whose tool_use_id
        is a key of ``output_files`` (its whole output is that file; the block's own content is
        ignored), is stored whole apart, in the same transaction, and keeps a preview
        (``store._outputs``); the caller closes the files afterwards. Raises ``InvariantError``
        when the pairing invariant would break; nothing of that call is stored then. With
        ``lease_owner``, the same transaction checks that this owner still holds an unexpired
        lease on the thread, and raises ``LeaseLost`` (storing nothing of that call) when it does
        not; other appends of the same batch still commit."""
        batch = [msgs] if isinstance(msgs, NewMessage) else list(msgs)
        if not batch:
            return []
        loop = asyncio.get_running_loop()
        item = _PendingAppend(
            thread_id, batch, usage, loop.create_future(), lease_owner, output_files
        )
        item.future.add_done_callback(_consume)
        self._pending.append(item)
        try:
            async with self._lock:
                if not item.future.done() and self._pending:
                    taken, self._pending = self._pending, []
                    await finish_uncancelled(self._commit_appends(taken))
        except asyncio.CancelledError:
            if item in self._pending:  # never taken: it will not be written later either
                self._pending.remove(item)
            raise
        return item.future.result()

    async def _commit_appends(self, batch: list[_PendingAppend]) -> None:
        try:
            outcomes = await self.db.write(
                lambda c: self._apply_appends(c, batch), where="appending messages"
            )
        except Exception as err:  # the whole transaction failed: every caller hears why
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(err)
            return
        for p, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                p.future.set_exception(outcome)
            else:
                p.future.set_result(outcome)

    async def _apply_appends(
        self, conn: AsyncConnection, batch: list[_PendingAppend]
    ) -> list[list[Message] | StoreError]:
        ids = sorted({p.thread_id for p in batch})
        now = utcnow()
        live = sa.case((threads.c.lease_expires_at > now, True), else_=False).label("lease_live")
        cols = (threads.c.id, threads.c.head_seq, threads.c.pending_tool_ids, threads.c.lease_owner)
        q = sa.select(*cols, live).where(threads.c.id.in_(ids))
        if conn.dialect.name == "postgresql":
            q = q.with_for_update(of=threads)
        found = list(await conn.execute(q))
        state = {r.id: (int(r.head_seq), tuple(r.pending_tool_ids or ())) for r in found}
        leases = {r.id: (r.lease_owner, bool(r.lease_live)) for r in found}
        outcomes: list[list[Message] | StoreError] = []
        msg_rows: list[dict[str, Any]] = []
        usage_rows: list[dict[str, Any]] = []
        stored: list[Message] = []
        for p in batch:
            st = state.get(p.thread_id)
            if st is None:
                outcomes.append(ThreadNotFound(f"no thread {format_ref(p.thread_id)}"))
                continue
            head, pending = st
            if p.lease_owner is not None and leases[p.thread_id] != (p.lease_owner, True):
                holder = leases[p.thread_id][0]
                outcomes.append(
                    LeaseLost(
                        f"{format_ref(p.thread_id)}: {p.lease_owner} no longer holds the lease"
                        f" (held by {holder or 'nobody'}); nothing was appended",
                        holder,
                    )
                )
                continue
            try:
                new_pending = check_append(pending, head, p.messages)
            except InvariantError as err:
                outcomes.append(InvariantError(f"{format_ref(p.thread_id)}: {err}"))
                continue
            msgs = p.messages
            if _outputs.needs_apart(msgs, p.files):
                try:
                    msgs = await _outputs.store_apart(conn, p.thread_id, head + 1, msgs, p.files)
                except InvariantError as err:
                    outcomes.append(InvariantError(f"{format_ref(p.thread_id)}: {err}"))
                    continue
            rows, out = _message_rows(p.thread_id, head + 1, msgs, now)
            msg_rows.extend(rows)
            if p.usage is not None:
                last_assistant = next(
                    (x.seq for x in reversed(out) if x.role == "assistant"), out[-1].seq
                )
                usage_rows.append(_usage_row(p.thread_id, last_assistant, p.usage, now))
            state[p.thread_id] = (head + len(p.messages), new_pending)
            stored.extend(out)
            outcomes.append(out)
        if msg_rows:
            await self._insert_message_rows(conn, msg_rows)
            touched = {m.thread_id for m in stored}
            await conn.execute(
                threads.update()
                .where(threads.c.id == sa.bindparam("b_id"))
                .values(
                    head_seq=sa.bindparam("b_head"),
                    pending_tool_ids=sa.bindparam("b_pending", type_=sa.JSON),
                    version=threads.c.version + 1,
                    updated_at=now,
                ),
                [
                    {"b_id": tid, "b_head": state[tid][0], "b_pending": list(state[tid][1])}
                    for tid in sorted(touched)
                ],
            )
        if usage_rows:
            await conn.execute(usage.insert(), usage_rows)
        return outcomes

    async def record_usage(
        self, thread_id: str, record: UsageRecord, *, seq: int | None = None
    ) -> None:
        """A usage row not tied to an appended message (e.g. a response that was discarded)."""
        now = utcnow()

        async def fn(conn: AsyncConnection) -> None:
            await conn.execute(usage.insert().values(**_usage_row(thread_id, seq, record, now)))

        await self._write(fn, where="recording usage")

    # ----------------------------------------------------------------- reading messages

    async def _chain(
        self, conn: AsyncConnection, thread_id: str
    ) -> tuple[int, list[tuple[str, int]]]:
        """(head_seq, [(owner, owns seqs after this)…] from the thread itself up its fork
        ancestry). Ancestry never changes, so it is cached; the head is read every time."""
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

    async def _read_range(
        self, conn: AsyncConnection, thread_id: str, start: int, end: int | None
    ) -> list[Message]:
        head, chain = await self._chain(conn, thread_id)
        out: list[Message] = []
        for owner, lo, hi in segments(head, chain, start, end):
            rows = await conn.execute(
                sa.select(*MESSAGE_COLUMNS)
                .where(messages.c.thread_id == owner, messages.c.seq.between(lo, hi))
                .order_by(messages.c.seq)
            )
            out.extend(messages_from_rows(rows))
        return out

    async def ancestry(self, thread_id: str) -> list[tuple[str, int]]:
        """Whose messages a thread shows: ``[(thread_id, head), (parent, fork point),
        (grandparent, parent's fork point), …]`` — message n of the thread is message n of the
        first entry whose bound is ≥ n, walking from the end. ``T-x#n`` names the same message
        for every x in the list whose bound is ≥ n."""

        async def fn(conn: AsyncConnection) -> list[tuple[str, int]]:
            head, chain = await self._chain(conn, thread_id)
            out = [(chain[0][0], head)]
            for (_, after), (owner, _) in itertools.pairwise(chain):
                out.append((owner, after))
            return out

        return await self.db.read(fn, where="reading a thread's ancestry")

    async def messages(
        self, thread_id: str, *, start: int = 1, end: int | None = None
    ) -> list[Message]:
        """The visible history of a thread (inherited messages of a fork included), or the
        range ``start..end`` (inclusive; ``end=None`` means to the end)."""
        if self.db.raw is not None:
            return await self.db.raw.run(
                lambda c: raw_read_range(c, thread_id, start, end), where="reading messages"
            )
        return await self.db.read(
            lambda c: self._read_range(c, thread_id, start, end), where="reading messages"
        )

    async def read(self, ref: str | ThreadRef) -> tuple[ThreadInfo, list[Message]]:
        """A ref's thread and its messages (the ref's range, or the whole history)."""
        resolved = await self.resolve(ref)

        async def fn(conn: AsyncConnection) -> tuple[ThreadInfo, list[Message]]:
            info = await self._thread(conn, resolved.thread.id)
            msgs = await self._read_range(conn, info.id, resolved.start or 1, resolved.end)
            return info, msgs

        return await self.db.read(fn, where="reading a thread")

    async def output_pieces(
        self, thread_id: str, seq: int, tool_use_id: str, *, start: int = 0, end: int | None = None
    ) -> AsyncIterator[str]:
        """Characters ``start..end`` (end exclusive; None: to the end) of the whole output of
        the tool result ``tool_use_id`` in message ``seq`` of the thread (an inherited message of
        a fork included), about a chunk (1 MiB) at a time: memory stays bounded whatever the
        output's size. Only outputs stored apart (``ToolResultBlock.stored``) have pieces."""
        owner = _outputs.owner_of(await self.ancestry(thread_id), seq)
        if self.db.raw is not None:
            raw = self.db.raw
            first, fetch = _outputs.sqlite_reader(
                lambda fn: raw.run(fn, where="reading a tool output"), owner, seq, tool_use_id
            )
        else:
            first, fetch = _outputs.sqlalchemy_reader(
                lambda fn: self.db.read(fn, where="reading a tool output"),
                owner,
                seq,
                tool_use_id,
            )
        async for piece in _outputs.read_pieces(first, fetch, start=start, end=end):
            yield piece

    async def output_text(
        self, message: Message, block: ToolResultBlock, *, start: int = 0, end: int | None = None
    ) -> str:
        """The whole text of ``block`` (a tool result of ``message``), or its characters
        ``start..end``: the inline content, or the output stored apart. Holds it all in memory:
        page with ``start``/``end`` or stream with ``output_pieces`` for huge outputs."""
        if block.stored is None:
            return block.text[start:end]
        pieces = self.output_pieces(
            message.thread_id, message.seq, block.tool_use_id, start=start, end=end
        )
        return "".join([p async for p in pieces])

    async def message(self, thread_id: str, seq: int) -> Message:
        msgs = await self.messages(thread_id, start=seq, end=seq)
        if not msgs:
            raise ThreadNotFound(f"{format_ref(thread_id)} has no message #{seq}")
        return msgs[0]

    # ----------------------------------------------------------------- refs

    async def resolve(self, ref: str | ThreadRef) -> ResolvedRef:
        """A ref or unique id prefix → its thread (and range). Ambiguous prefixes raise
        ``AmbiguousRef`` listing the candidates; anchors past the end raise ``ThreadNotFound``."""
        parsed = ThreadRef.parse(ref) if isinstance(ref, str) else ref

        async def fn(conn: AsyncConnection) -> ThreadInfo:
            if is_full_id(parsed.id):
                return await self._thread(conn, parsed.id)
            rows = (
                await conn.execute(
                    sa.select(*THREAD_COLUMNS)
                    .where(id_prefix_condition(threads.c.id, parsed.id, self.db.dialect))
                    .order_by(threads.c.id)
                    .limit(11)
                )
            ).all()
            if not rows:
                raise ThreadNotFound(f"no thread matches {format_ref(parsed.id)}")
            if len(rows) > 1:
                cands = [format_ref(r.id) for r in rows[:10]]
                more = " …" if len(rows) > 10 else ""
                raise AmbiguousRef(
                    f"{format_ref(parsed.id)} is ambiguous: {', '.join(cands)}{more}", cands
                )
            return thread_from_row(rows[0])

        info = as_seen(await self.db.read(fn, where="resolving a ref"))
        if parsed.start is None:
            return ResolvedRef(info, None, None)
        if parsed.start > info.head_seq:
            raise ThreadNotFound(
                f"{format_ref(info.id, parsed.start)}: the thread has {info.head_seq} messages"
            )
        end = (
            info.head_seq
            if parsed.open_end or parsed.end is None
            else min(parsed.end, info.head_seq)
        )
        if parsed.end is not None and not parsed.open_end and parsed.end > info.head_seq:
            raise ThreadNotFound(
                f"{format_ref(info.id, parsed.start, parsed.end)}: the thread has"
                f" {info.head_seq} messages"
            )
        return ResolvedRef(info, parsed.start, end)

    # ----------------------------------------------------------------- forks

    async def fork(
        self,
        source_id: str,
        *,
        at: int | None = None,
        title: str | None = None,
        parent_id: str | None = None,
        status: Status = Status.IDLE,
        messages: Sequence[NewMessage] = (),
    ) -> ThreadInfo:
        """A new thread sharing ``source_id``'s history up to message ``at`` (default: its end).

        Stores one thread row and no message rows, whatever the history's length. Refuses a
        point between a tool_use and its result, naming the nearest valid points."""
        tid = new_id()
        now = utcnow()

        async def fn(conn: AsyncConnection) -> ThreadInfo:
            src = await self._thread(conn, source_id)
            point = src.head_seq if at is None else at
            if point < 1 or point > src.head_seq:
                raise ForkPointError(
                    f"cannot fork {src.ref} at #{point}: it has messages 1..{src.head_seq}"
                )
            if point == src.head_seq and not src.head_seq:
                raise ForkPointError(f"cannot fork {src.ref}: it has no messages")
            msgs = await self._read_range(conn, src.id, point, min(point + 1, src.head_seq))
            if at is None and len(msgs) == 1 and point > 1 and _has_tool_use(msgs[0]):
                # the default end of a thread that is mid-turn (running, or interrupted with
                # its calls unanswered): fork at the last turn boundary, before those calls
                point -= 1
                msgs = await self._read_range(conn, src.id, point, point + 1)
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
            await self._insert_thread(
                conn,
                now,
                messages,
                after_seq=point,
                id=tid,
                kind=str(src.kind),
                title=title
                if title is not None
                else (f"fork of {src.title}" if src.title else "fork"),
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
            return await self._thread(conn, tid)

        return await self._write(fn, where="forking a thread")

    # ----------------------------------------------------------------- listing and lineage

    async def list_threads(
        self,
        *,
        job_id: str | None = None,
        status: Status | str | None = None,
        kind: Kind | str | None = None,
        parent_id: str | None = None,
        forked_from_id: str | None = None,
        limit: int | None = None,
        oldest_first: bool = False,
    ) -> list[ThreadInfo]:
        q = sa.select(*THREAD_COLUMNS)
        if job_id is not None:
            q = q.where(threads.c.job_id == job_id)
        wanted = None if status is None else Status(status)
        # ``running`` and ``interrupted`` depend on whether the runner lives (``as_seen``):
        # fetch both, present, then filter (and limit) here; running threads are few
        live_dependent = wanted in (Status.RUNNING, Status.INTERRUPTED)
        if live_dependent:
            q = q.where(threads.c.status.in_([str(Status.RUNNING), str(Status.INTERRUPTED)]))
        elif wanted is not None:
            q = q.where(threads.c.status == str(wanted))
        if kind is not None:
            q = q.where(threads.c.kind == str(Kind(kind)))
        if parent_id is not None:
            q = q.where(threads.c.parent_id == parent_id)
        if forked_from_id is not None:
            q = q.where(threads.c.forked_from_id == forked_from_id)
        q = q.order_by(threads.c.id if oldest_first else threads.c.id.desc())
        if limit is not None and not live_dependent:
            q = q.limit(limit)

        async def fn(conn: AsyncConnection) -> list[ThreadInfo]:
            return [thread_from_row(r) for r in await conn.execute(q)]

        now = utcnow()
        found = [as_seen(t, now) for t in await self.db.read(fn, where="listing threads")]
        if live_dependent:
            found = [t for t in found if t.status == wanted]
            if limit is not None:
                found = found[:limit]
        return found

    async def children(self, thread_id: str) -> list[ThreadInfo]:
        """Threads spawned by ``thread_id`` (spawn edges), oldest first."""
        return await self.list_threads(parent_id=thread_id, oldest_first=True)

    async def forks(self, thread_id: str) -> list[ThreadInfo]:
        """Threads forked from ``thread_id`` (fork edges), oldest first."""
        return await self.list_threads(forked_from_id=thread_id, oldest_first=True)

    async def job_tree(self, job_id: str) -> list[ThreadInfo]:
        """Every thread of a job, oldest first (the lead, its workers, forks, readers…)."""
        return await self.list_threads(job_id=job_id, oldest_first=True)

    # ----------------------------------------------------------------- status and results

    async def set_status(
        self,
        thread_id: str,
        status: Status,
        *,
        error: str | None = None,
        result: Result | None = None,
        expect: Iterable[Status] | None = None,
        lease_owner: str | None = None,
    ) -> ThreadInfo:
        """Move a thread to ``status`` along the state machine. Writing the terminal status a
        thread already has is a no-op (idempotent); the write completes even if the caller is
        cancelled meanwhile. ``expect`` refuses the change unless the current status is one of
        those (compare-and-set). With ``lease_owner`` the update itself requires that runner
        to hold a live lease (in its WHERE clause: atomic against a takeover) and raises
        ``LeaseLost``, writing nothing, when it does not."""
        from ._redact import redact

        status = Status(status)
        expected = None if expect is None else {Status(s) for s in expect}
        now = utcnow()

        async def fn(conn: AsyncConnection) -> ThreadInfo:
            info = await self._thread(conn, thread_id)
            if expected is not None and info.status not in expected:
                raise StatusError(
                    f"{info.ref} is {info.status}, expected {' or '.join(sorted(expected))}"
                )
            if info.status == status and status.terminal:
                return info
            if info.status != status and status not in _ALLOWED[info.status]:
                raise StatusError(f"{info.ref}: cannot go from {info.status} to {status}")
            values: dict[str, Any] = {
                "status": str(status),
                "updated_at": now,
                "version": threads.c.version + 1,
            }
            if error is not None or status in (Status.RUNNING, Status.QUEUED):
                # every error text is stored here: a provider's 401 may echo the key
                values["error"] = None if error is None else redact(error)
            if result is not None:
                values["result"] = result.model_dump(mode="json", exclude_none=True)
            where = [threads.c.id == thread_id]
            if lease_owner is not None:
                where += [threads.c.lease_owner == lease_owner, threads.c.lease_expires_at > now]
            done = await conn.execute(threads.update().where(*where).values(**values))
            if lease_owner is not None and done.rowcount == 0:
                raise LeaseLost(
                    f"{info.ref}: {lease_owner} no longer holds the lease; status not written",
                    info.lease_owner,
                )
            return await self._thread(conn, thread_id)

        write = self._write(fn, where="setting a status")
        if status.terminal:
            # shielded from the caller's cancellation while it waits for the writer, too
            return await finish_uncancelled(write)
        return await write

    async def set_result(self, thread_id: str, result: Result) -> None:
        now = utcnow()
        payload = result.model_dump(mode="json", exclude_none=True)

        async def fn(conn: AsyncConnection) -> None:
            res = await conn.execute(
                threads.update()
                .where(threads.c.id == thread_id)
                .values(result=payload, updated_at=now, version=threads.c.version + 1)
            )
            if res.rowcount == 0:
                raise ThreadNotFound(f"no thread {format_ref(thread_id)}")

        await self._write(fn, where="storing a result")

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        model: str | None = None,
        system_prompt: str | None = None,
        tools: Sequence[str] | None = None,
        task: dict[str, Any] | None = None,
    ) -> ThreadInfo:
        """Metadata edits (never messages)."""
        values: dict[str, Any] = {}
        for key, value in (
            ("title", title),
            ("model", model),
            ("system_prompt", system_prompt),
            ("task", task),
        ):
            if value is not None:
                values[key] = value
        if tools is not None:
            values["tools"] = list(tools)

        async def fn(conn: AsyncConnection) -> ThreadInfo:
            if values:
                await conn.execute(
                    threads.update()
                    .where(threads.c.id == thread_id)
                    .values(**values, updated_at=utcnow(), version=threads.c.version + 1)
                )
            return await self._thread(conn, thread_id)

        return await self._write(fn, where="updating a thread")

    # ----------------------------------------------------------------- checkpoints

    async def record_checkpoint(self, thread_id: str, seq: int, commit: str) -> None:
        """Record that the thread's files after message ``seq`` are ``commit`` (an opaque
        string to the store). Recording the same seq again replaces it: a replayed step
        checkpoints the files as they are now."""
        now = utcnow()

        async def fn(conn: AsyncConnection) -> None:
            await self._thread(conn, thread_id)
            await conn.execute(
                checkpoints.delete().where(
                    checkpoints.c.thread_id == thread_id, checkpoints.c.seq == seq
                )
            )
            await conn.execute(
                checkpoints.insert().values(
                    thread_id=thread_id, seq=seq, commit=commit, created_at=now
                )
            )

        await self._write(fn, where="recording a checkpoint")

    async def checkpoint_at(self, thread_id: str, seq: int | None = None) -> tuple[int, str] | None:
        """The checkpoint in force at message ``seq`` of the thread (default: its end): the
        newest one at or before ``seq``, found along the fork ancestry — a fork's files at
        message n are its parent's at n when n is an inherited message. None when no message up
        to ``seq`` changed files."""

        async def fn(conn: AsyncConnection) -> tuple[int, str] | None:
            head, chain = await self._chain(conn, thread_id)
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

        return await self.db.read(fn, where="reading checkpoints")

    async def checkpoints_of(self, thread_id: str) -> list[tuple[int, str]]:
        """The thread's own checkpoints (not its fork ancestry's), oldest first."""
        q = (
            sa.select(checkpoints.c.seq, checkpoints.c.commit)
            .where(checkpoints.c.thread_id == thread_id)
            .order_by(checkpoints.c.seq)
        )

        async def fn(conn: AsyncConnection) -> list[tuple[int, str]]:
            return [(int(r.seq), str(r.commit)) for r in await conn.execute(q)]

        return await self.db.read(fn, where="reading checkpoints")

    # ----------------------------------------------------------------- usage

    async def usage_totals(
        self, *, thread_id: str | None = None, job_id: str | None = None
    ) -> list[UsageTotal]:
        """Usage summed per thread (SQL sums of the usage rows): of one thread, of every thread
        of a job, or of every thread."""
        cols = [
            usage.c.thread_id,
            sa.func.coalesce(sa.func.sum(usage.c.input_tokens), 0),
            sa.func.coalesce(sa.func.sum(usage.c.output_tokens), 0),
            sa.func.coalesce(sa.func.sum(usage.c.cache_read_input_tokens), 0),
            sa.func.coalesce(sa.func.sum(usage.c.cache_creation_input_tokens), 0),
            sa.func.coalesce(sa.func.sum(usage.c.cost_usd), 0.0),
            sa.func.count(),
        ]
        q = sa.select(*cols).group_by(usage.c.thread_id).order_by(usage.c.thread_id)
        if thread_id is not None:
            q = q.where(usage.c.thread_id == thread_id)
        if job_id is not None:
            q = q.join(threads, threads.c.id == usage.c.thread_id).where(threads.c.job_id == job_id)

        async def fn(conn: AsyncConnection) -> list[UsageTotal]:
            return [
                UsageTotal(
                    thread_id=r[0],
                    usage=Usage(
                        input_tokens=int(r[1]),
                        output_tokens=int(r[2]),
                        cache_read_input_tokens=int(r[3]),
                        cache_creation_input_tokens=int(r[4]),
                    ),
                    cost_usd=float(r[5]),
                    responses=int(r[6]),
                )
                for r in await conn.execute(q)
            ]

        return await self.db.read(fn, where="summing usage")

    async def thread_usage(self, thread_id: str) -> Usage:
        rows = await self.usage_totals(thread_id=thread_id)
        return rows[0].usage if rows else Usage()

    async def job_usage(self, job_id: str) -> Usage:
        total = Usage()
        for row in await self.usage_totals(job_id=job_id):
            total = total + row.usage
        return total

    # ----------------------------------------------------------------- leases

    async def acquire_lease(
        self, thread_id: str, owner: str, *, ttl_s: float = 60.0, replace: str | None = None
    ) -> None:
        """Make ``owner`` the one runner of the thread until the lease expires (renew it while
        running). Raises ``LeaseHeld`` when another owner holds a lease that has not expired —
        unless that owner is ``replace`` (a runner the caller knows is dead)."""
        now = utcnow()

        async def fn(conn: AsyncConnection) -> None:
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
            info = await self._thread(conn, thread_id)
            raise LeaseHeld(
                f"{info.ref} is being run by {info.lease_owner} (lease until"
                f" {info.lease_expires_at:%H:%M:%S} UTC); wait for it or stop that process",
                info.lease_owner,
            )

        await self._write(fn, where="acquiring a lease")

    async def renew_lease(self, thread_id: str, owner: str, *, ttl_s: float = 60.0) -> bool:
        """Extend the lease; False when ``owner`` no longer holds it."""
        now = utcnow()

        async def fn(conn: AsyncConnection) -> bool:
            res = await conn.execute(
                threads.update()
                .where(threads.c.id == thread_id, threads.c.lease_owner == owner)
                .values(lease_expires_at=now + timedelta(seconds=ttl_s))
            )
            return bool(res.rowcount == 1)

        return await self._write(fn, where="renewing a lease")

    async def release_lease(self, thread_id: str, owner: str) -> None:
        async def fn(conn: AsyncConnection) -> None:
            await conn.execute(
                threads.update()
                .where(threads.c.id == thread_id, threads.c.lease_owner == owner)
                .values(lease_owner=None, lease_expires_at=None)
            )

        await self._write(fn, where="releasing a lease")

    async def stale_leases(self) -> list[ThreadInfo]:
        """Threads whose runner's lease expired without being released (the runner died)."""
        now = utcnow()
        q = sa.select(*THREAD_COLUMNS).where(
            threads.c.lease_owner.is_not(None), threads.c.lease_expires_at < now
        )

        async def fn(conn: AsyncConnection) -> list[ThreadInfo]:
            return [thread_from_row(r) for r in await conn.execute(q)]

        return await self.db.read(fn, where="finding stale leases")

    # ----------------------------------------------------------------- dispatches

    async def spawn(
        self,
        *,
        lead_id: str,
        tool_use_id: str,
        task_index: int,
        task_key: str | None,
        kind: Kind = Kind.WORKER,
        title: str = "",
        task: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        tools: Sequence[str] = (),
        model: str | None = None,
        messages: Sequence[NewMessage] = (),
        thread_id: str | None = None,
    ) -> tuple[ThreadInfo, bool]:
        """The worker thread for task ``task_index`` of the lead's ``tool_use_id``: created with
        its dispatch row in one transaction, or — when that dispatch already exists (a replayed
        lead turn) — the existing worker. Returns (thread, created). ``thread_id`` lets the caller
        choose the new thread's id (e.g. to name it in the worker's own system prompt)."""
        tid = thread_id or new_id()
        now = utcnow()
        check_append((), 0, messages)

        async def fn(conn: AsyncConnection) -> tuple[ThreadInfo, bool]:
            row = (
                await conn.execute(
                    sa.select(dispatches.c.worker_id).where(
                        dispatches.c.lead_id == lead_id,
                        dispatches.c.tool_use_id == tool_use_id,
                        dispatches.c.task_index == task_index,
                    )
                )
            ).first()
            if row is not None:
                return await self._thread(conn, row.worker_id), False
            job = await self._job_of(conn, lead_id)
            await self._insert_thread(
                conn,
                now,
                messages,
                id=tid,
                kind=str(kind),
                title=title,
                status=str(Status.QUEUED),
                parent_id=lead_id,
                job_id=job,
                task=task,
                system_prompt=system_prompt,
                tools=list(tools),
                model=model,
            )
            await conn.execute(
                dispatches.insert().values(
                    lead_id=lead_id,
                    tool_use_id=tool_use_id,
                    task_index=task_index,
                    task_key=task_key,
                    worker_id=tid,
                    status=str(Status.QUEUED),
                    created_at=now,
                    updated_at=now,
                )
            )
            return await self._thread(conn, tid), True

        return await self._write(fn, where="spawning a worker")

    async def dispatches_of(self, lead_id: str, tool_use_id: str | None = None) -> list[Dispatch]:
        q = sa.select(dispatches).where(dispatches.c.lead_id == lead_id)
        if tool_use_id is not None:
            q = q.where(dispatches.c.tool_use_id == tool_use_id)
        q = q.order_by(dispatches.c.id)

        async def fn(conn: AsyncConnection) -> list[Dispatch]:
            return [
                Dispatch(r.lead_id, r.tool_use_id, r.task_index, r.task_key, r.worker_id, r.status)
                for r in await conn.execute(q)
            ]

        return await self.db.read(fn, where="reading dispatches")

    async def set_dispatch_status(self, worker_id: str, status: str) -> None:
        now = utcnow()

        async def fn(conn: AsyncConnection) -> None:
            await conn.execute(
                dispatches.update()
                .where(dispatches.c.worker_id == worker_id)
                .values(status=status, updated_at=now)
            )

        await self._write(fn, where="updating a dispatch")

    # ----------------------------------------------------------------- search

    async def search(
        self, query: str, *, job_id: str | None = None, limit: int = 20
    ) -> list[SearchHit]:
        """Full-text search over every message of every thread: hits as ``T-…#seq`` with a
        one-line snippet, best first."""
        return await self.db.read(
            lambda c: _search.search(c, query, job_id=job_id, limit=limit), where="searching"
        )


def _usage_row(thread_id: str, seq: int | None, rec: UsageRecord, now: Any) -> dict[str, Any]:
    u = rec.usage
    return {
        "thread_id": thread_id,
        "seq": seq,
        "model": rec.model,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
        "cost_usd": rec.cost_usd,
        "created_at": now,
    }


def raw_read_range(
    conn: sqlite3.Connection, thread_id: str, start: int, end: int | None
) -> list[Message]:
    """``Store.messages`` on SQLite, in one call on a plain sqlite3 connection (the read path's
    hot spot is SQLAlchemy's async machinery, not SQLite): the ancestry in one recursive query,
    then one indexed select per segment."""
    chain_rows = conn.execute(CHAIN_SQL, (thread_id,)).fetchall()
    if not chain_rows:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    head = int(chain_rows[0][2])
    chain = [(str(r[0]), int(r[1])) for r in chain_rows]
    rows: list[Any] = []
    for owner, lo, hi in segments(head, chain, start, end):
        rows.extend(conn.execute(MESSAGES_SQL, (owner, lo, hi)))
    return messages_from_rows(rows)


def _message_rows(
    thread_id: str, first_seq: int, msgs: Sequence[NewMessage], now: Any
) -> tuple[list[dict[str, Any]], list[Message]]:
    """Rows for ``messages`` (with their search text under ``_text``) and the stored models."""
    rows: list[dict[str, Any]] = []
    out: list[Message] = []
    for i, m in enumerate(msgs):
        seq = first_seq + i
        content = [b.model_dump(mode="json", exclude_none=True) for b in m.content]
        rows.append(
            {
                "thread_id": thread_id,
                "seq": seq,
                "role": m.role,
                "content": json.dumps(content, ensure_ascii=False, separators=(",", ":")),
                "format": 1,
                "created_at": now,
                "_text": _search.searchable_text(m.content),
            }
        )
        out.append(
            Message.model_construct(
                thread_id=thread_id, seq=seq, role=m.role, content=list(m.content), created_at=now
            )
        )
    return rows, out


def _has_tool_use(message: Message) -> bool:
    return any(isinstance(b, ToolUseBlock) for b in message.content)


def _consume(fut: asyncio.Future[Any]) -> None:
    # an append whose caller was cancelled may still fail later; don't log "never retrieved"
    if not fut.cancelled():
        fut.exception()
