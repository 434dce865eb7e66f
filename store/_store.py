"""``Store``, the thread store: the API everything above ``store`` uses.

A thread store with parts, as an SDK client hangs resources off itself: ``store.leases``
(``_leases``), ``store.usage`` (``_ledger``), ``store.dispatches`` (``_dispatches``) and
``store.checkpoints`` (``_checkpoints``). Every write of every part goes through the process's
one writer (``_writer``: serialised, appends group-committed); the statements themselves live in
modules per table family (``_threads``, ``_messages``, ``_search``), histories in ``_history``.
"""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

from . import _dispatches, _messages, _outputs, _search, _threads
from ._checkpoints import Checkpoints
from ._dispatches import Dispatches
from ._engine import Database
from ._exclusive import exclusive
from ._history import History
from ._invariants import check_append
from ._leases import Lease, Leases
from ._ledger import Ledger
from ._liveness import as_seen
from ._outputs import OutputFile
from ._sqlite import Tx, as_utc, utcnow
from ._writer import Writer
from .errors import ThreadNotFound
from .models import (
    Kind,
    Message,
    NewMessage,
    Result,
    SearchHit,
    Status,
    ThreadInfo,
    ToolResultBlock,
    UsageRecord,
)
from .refs import (
    ResolvedRef,
    ThreadRef,
    anchor_range,
    format_ref,
    id_at,
    new_id,
    shortest_refs,
)


class Store:
    """Threads persisted as they happen. Open with ``await Store.open(url)`` or
    ``async with await Store.open(url) as store`` (the schema is upgraded to head on open)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._writer = Writer(db)
        self._history = History()
        self.leases = Leases(self._writer)
        self.usage = Ledger(self._writer)
        self.dispatches = Dispatches(self._writer)
        self.checkpoints = Checkpoints(self._writer, self._history)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        create_dirs: bool = False,
        migrate: bool = True,
        synchronous: str = "FULL",
        password: str | None = None,
    ) -> Store:
        """``password``: a PostgreSQL URL's when it names none (the command's PGPASSWORD)."""
        db = Database(url, create_dirs=create_dirs, synchronous=synchronous, password=password)
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
        created_at: datetime | None = None,
        source_key: str | None = None,
    ) -> ThreadInfo:
        """A new thread (a root of its own job unless ``job_id``/``parent_id`` say otherwise),
        with ``messages`` appended in the same transaction. ``created_at``: when it began
        elsewhere (an imported session), its time and its id's (listings sort by id) instead
        of now. ``source_key``: the source it stands for, one thread a key (``SourceTaken``
        names the thread holding it)."""
        check_append((), 0, messages)  # refuse bad messages before touching the database
        now = utcnow() if created_at is None else as_utc(created_at)
        values = {
            "id": thread_id or (new_id() if created_at is None else id_at(now)),
            "kind": str(Kind(kind)),
            "title": title,
            "status": str(status),
            "task": task,
            "system_prompt": system_prompt,
            "tools": list(tools),
            "model": model,
            "source_key": source_key,
        }
        return await self._writer.run(
            lambda tx: _messages.create(
                tx, now, messages, job_id=job_id, parent_id=parent_id, **values
            ),
            where="creating a thread",
        )

    async def get_thread(self, thread_id: str) -> ThreadInfo:
        """The thread as readers see it: ``running`` with its runner gone reads ``interrupted``
        (``_liveness``); transactions use ``_threads.get``, the stored row as it is."""
        info = await self.db.read(
            lambda tx: _threads.get(tx, thread_id), where="reading a thread", inline=True
        )
        return as_seen(info)

    async def append(
        self,
        thread_id: str,
        msgs: Sequence[NewMessage] | NewMessage,
        *,
        usage: UsageRecord | None = None,
        lease_owner: str | None = None,
        output_files: Mapping[str, OutputFile] | None = None,
        times: Sequence[datetime | None] | None = None,
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
        not; other appends of the same batch still commit (``_writer``: group commit).
        ``times``: each message's own time, one a message (an imported session's messages
        keep their source's); None, or a None item: the transaction's."""
        batch = [msgs] if isinstance(msgs, NewMessage) else list(msgs)
        if not batch:
            return []
        if times is not None and len(times) != len(batch):
            raise ValueError(f"{len(times)} times for {len(batch)} messages")
        return await self._writer.append(
            thread_id,
            batch,
            usage=usage,
            lease_owner=lease_owner,
            output_files=output_files,
            times=times,
        )

    # ----------------------------------------------------------------- reading messages

    async def ancestry(self, thread_id: str) -> list[tuple[str, int]]:
        """Whose messages a thread shows: ``[(thread_id, head), (parent, fork point),
        (grandparent, parent's fork point), …]`` — message n of the thread is message n of the
        first entry whose bound is ≥ n, walking from the end. ``T-x#n`` names the same message
        for every x in the list whose bound is ≥ n."""
        return await self.db.read(
            lambda tx: self._history.ancestry(tx, thread_id),
            where="reading a thread's ancestry",
            inline=True,
        )

    async def messages(
        self, thread_id: str, *, start: int = 1, end: int | None = None
    ) -> list[Message]:
        """The visible history of a thread (inherited messages of a fork included), or the
        range ``start..end`` (inclusive; ``end=None`` means to the end). ``TypeError`` when a
        bound is not a whole number (``start=3.5`` read nothing, ``start="2"`` failed deep in
        the read)."""
        start, end = _seq(start, "start"), None if end is None else _seq(end, "end")
        history = self._history
        return await self.db.read(
            lambda tx: history.read_range(tx, thread_id, start, end),
            where="reading messages",
            inline=lambda tx: history.read_range(tx, thread_id, start, end, small=True),
        )

    async def read(self, ref: str | ThreadRef) -> tuple[ThreadInfo, list[Message]]:
        """A ref's thread and its messages (the ref's range, or the whole history)."""
        resolved = await self.resolve(ref)
        tid, start, end = resolved.thread.id, resolved.start or 1, resolved.end

        def fn(tx: Tx) -> tuple[ThreadInfo, list[Message]]:
            return _threads.get(tx, tid), self._history.read_range(tx, tid, start, end)

        return await self.db.read(fn, where="reading a thread")

    async def message(self, thread_id: str, seq: int) -> Message:
        msgs = await self.messages(thread_id, start=seq, end=seq)
        if not msgs:
            raise ThreadNotFound(f"{format_ref(thread_id)} has no message #{seq}")
        return msgs[0]

    async def output_pieces(
        self,
        thread_id: str,
        seq: int,
        tool_use_id: str,
        *,
        start: int = 0,
        end: int | None = None,
    ) -> AsyncIterator[str]:
        """Characters ``start..end`` (end exclusive; None: to the end) of the whole output of
        the tool result ``tool_use_id`` in message ``seq`` of the thread (an inherited message of
        a fork included), about a chunk (1 MiB) at a time: memory stays bounded whatever the
        output's size. Only outputs stored apart (``ToolResultBlock.stored``) have pieces.
        (``workers.redacted`` masks secrets over the whole stream, one cut by a chunk boundary
        included.)"""
        owner = _outputs.owner_of(await self.ancestry(thread_id), seq)
        key = {"thread_id": owner, "seq": seq, "tool_use_id": tool_use_id}

        def read(fn: Any) -> Any:
            return self.db.read(fn, where="reading a tool output")

        async for piece in _outputs.read_pieces(read, key, start=start, end=end):
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

    # ----------------------------------------------------------------- refs and forks

    async def resolve(self, ref: str | ThreadRef) -> ResolvedRef:
        """A ref, a unique id prefix or a unique id end (``T-…x2p4``) → its thread (and range).
        Ambiguous ones raise ``AmbiguousRef`` listing the candidates; anchors past the end raise
        ``ThreadNotFound``."""
        parsed = ThreadRef.parse(ref) if isinstance(ref, str) else ref
        info = as_seen(
            await self.db.read(
                lambda tx: _threads.thread_from_row(
                    _threads.thread_row(tx, parsed.id, suffix=parsed.suffix)
                ),
                where="resolving a ref",
                inline=True,
            )
        )
        start, end = anchor_range(parsed, info.id, info.head_seq)
        return ResolvedRef(info, start, end)

    async def short_refs(self, thread_ids: Iterable[str]) -> dict[str, str]:
        """The shortest unique ref by its end of each thread id (``T-…x2p4``,
        ``refs.shortest_refs``): what a table with no room for whole refs prints."""
        wanted = list(thread_ids)
        if not wanted:
            return {}
        ids = await self.db.read(_threads.every_id, where="listing thread ids")
        return shortest_refs(wanted, ids)

    async def fork(
        self,
        source_id: str,
        *,
        at: int | None = None,
        title: str | None = None,
        parent_id: str | None = None,
        status: Status = Status.IDLE,
        messages: Sequence[NewMessage] = (),
        created_at: datetime | None = None,
        source_key: str | None = None,
        model: str | None = None,
    ) -> ThreadInfo:
        """A new thread sharing ``source_id``'s history up to message ``at`` (default: its end),
        on ``model`` if given (else its source's).

        Stores one thread row and no message rows, whatever the history's length. Refuses a
        point between a tool_use and its result, naming the nearest valid points.
        ``created_at`` and ``source_key`` as for ``create_thread`` (a branch of an imported
        session)."""
        if created_at is None:
            fork_id, now = new_id(), utcnow()
        else:
            now = as_utc(created_at)
            fork_id = id_at(now)
        return await self._writer.run(
            lambda tx: self._history.fork(
                tx,
                source_id,
                at=at,
                fork_id=fork_id,
                now=now,
                title=title,
                parent_id=parent_id,
                status=status,
                messages=messages,
                source_key=source_key,
                model=model,
            ),
            where="forking a thread",
        )

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
        older_than: str | None = None,
        prompts: bool = True,
    ) -> list[ThreadInfo]:
        """Threads matching every given filter, newest first (or oldest), as readers see them
        (``running`` with its runner gone reads ``interrupted``, and filters so);
        ``older_than``: only threads created before that thread id (a page after it);
        ``prompts`` False: without their system prompts (each None), for a listing that shows
        none — a thousand workers' prompts are megabytes."""
        return await self.db.read(
            lambda tx: _threads.listing(
                tx,
                job_id=job_id,
                status=status,
                kind=kind,
                parent_id=parent_id,
                forked_from_id=forked_from_id,
                limit=limit,
                oldest_first=oldest_first,
                older_than=older_than,
                prompts=prompts,
            ),
            where="listing threads",
        )

    async def children(self, thread_id: str) -> list[ThreadInfo]:
        """Threads spawned by ``thread_id`` (spawn edges), oldest first."""
        return await self.list_threads(parent_id=thread_id, oldest_first=True)

    async def forks(self, thread_id: str) -> list[ThreadInfo]:
        """Threads forked from ``thread_id`` (fork edges), oldest first."""
        return await self.list_threads(forked_from_id=thread_id, oldest_first=True)

    async def job_tree(self, job_id: str) -> list[ThreadInfo]:
        """Every thread of a job, oldest first (the lead, its workers, forks, readers…),
        without their system prompts (``list_threads``' ``prompts``)."""
        return await self.list_threads(job_id=job_id, oldest_first=True, prompts=False)

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
        """Move a thread to ``status`` along the state machine (``_threads.ALLOWED``). Writing
        the terminal status a thread already has is a no-op (idempotent); the write completes
        even if the caller is cancelled meanwhile. ``expect`` refuses the change unless the
        current status is one of those (compare-and-set). With ``lease_owner`` the update itself
        requires that runner to hold a live lease (in its WHERE clause: atomic against a
        takeover) and raises ``LeaseLost``, writing nothing, when it does not."""
        status = Status(status)
        expected = None if expect is None else {Status(s) for s in expect}
        now = utcnow()

        return await self._writer.run(
            lambda tx: _threads.set_status(
                tx,
                thread_id,
                status,
                now=now,
                error=error,
                result=result,
                expected=expected,
                lease_owner=lease_owner,
            ),
            where="setting a status",
            terminal=status.terminal,
        )

    async def finish(
        self,
        lease: Lease,
        status: Status,
        *,
        error: str | None = None,
        result: Result | None = None,
    ) -> ThreadInfo:
        """A run's last write, in one transaction: the terminal ``status`` (with ``error`` and
        ``result``; ``set_status`` with ``lease_owner``, so ``LeaseLost`` writes nothing), the
        lease given up, and the thread's dispatch row (if it has one) marked with the status.
        Shielded like every terminal write; ``lease.released`` tells ``Leases.hold`` so."""
        if not status.terminal:
            raise ValueError(f"finish needs a terminal status, not {status}")
        tid, owner, now = lease.thread_id, lease.owner, utcnow()
        lease.ending = True
        info = await self._writer.run(
            lambda tx: _dispatches.finish(
                tx, tid, owner, status, now=now, error=error, result=result
            ),
            where="finishing a run",
            terminal=True,
        )
        lease.released = True
        return info

    async def hand_off(
        self,
        lease: Lease,
        *,
        result: Result | None,
        successor: Mapping[str, Any],
        messages: Sequence[NewMessage],
    ) -> ThreadInfo:
        """A run's last write when its thread hands off (SPEC "Jobs larger than one context"),
        in one transaction: the thread ends ``done`` with ``result`` under the lease (``LeaseLost``
        writes nothing), the lease is given up, and its successor is created ``queued`` with
        ``continues`` set and its first ``messages``; the thread's dispatch row moves to it.
        ``successor``: the new thread's ``id`` (required), and any of ``system_prompt``,
        ``tools``, ``task``, ``title``, ``model`` that differ from the thread's. Stored before
        anything acts on it, and at most once: a thread continued already returns its successor
        with nothing written. Shielded like every terminal write."""
        if "id" not in successor:
            raise ValueError("hand_off needs the successor's id")
        check_append((), 0, messages)  # refused before anything is written
        tid, owner, now = lease.thread_id, lease.owner, utcnow()
        lease.ending = True
        info = await self._writer.run(
            lambda tx: _dispatches.hand_off(
                tx, tid, owner, now=now, result=result, successor=successor, messages=messages
            ),
            where="handing a thread off",
            terminal=True,
        )
        lease.released = True
        return info

    async def set_result(self, thread_id: str, result: Result) -> None:
        values = {"result": result.model_dump(mode="json", exclude_none=True)}
        now = utcnow()
        await self._writer.run(
            lambda tx: _threads.update(tx, thread_id, values, now), where="storing a result"
        )

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
        given = {"title": title, "model": model, "system_prompt": system_prompt, "task": task}
        values: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if tools is not None:
            values["tools"] = list(tools)
        now = utcnow()
        return await self._writer.run(
            lambda tx: _threads.update(tx, thread_id, values, now), where="updating a thread"
        )

    async def adopt(self, thread_id: str, parent_id: str) -> ThreadInfo:
        """Hang a thread without a parent under ``parent_id``, its job joining the parent's
        (``_threads.adopt``): a subagent imported before the session that spawned it."""
        now = utcnow()
        return await self._writer.run(
            lambda tx: _threads.adopt(tx, thread_id, parent_id, now), where="adopting a thread"
        )

    def exclusive(self, name: str) -> AbstractAsyncContextManager[None]:
        """``async with store.exclusive(name):`` one holder at a time across every process of
        this database (``_exclusive``); never taken while a write is under way."""
        return exclusive(self.db, name)

    # ----------------------------------------------------------------- search

    async def search(
        self, query: str, *, job_id: str | None = None, limit: int = 20
    ) -> list[SearchHit]:
        """Full-text search over every message of every thread: hits as ``T-…#seq`` with a
        one-line snippet, best first."""
        return await self.db.read(
            lambda tx: _search.search(tx, query, job_id=job_id, limit=limit), where="searching"
        )


def _seq(value: object, name: str) -> int:
    """A message number given to the store's API, as an ``int``; ``TypeError`` naming the
    argument otherwise (a bool, a float, a string)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be a message number (an int), not {value!r}")
    return operator.index(value)
