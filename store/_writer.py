"""The process's one writer: every write transaction of a ``Store`` goes through it.

Writes are serialised on one lock. Appends are group-committed: appends that arrive while a
transaction is running are validated and written together in the next one (one
``BEGIN IMMEDIATE``, one multi-row insert per table), and each caller's await returns only after
the transaction holding its messages has committed. Other writes run one transaction each. Once
a transaction has started it is finished even if its caller is cancelled; a terminal write
(``terminal``) is shielded while it waits for the lock, too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from . import _outputs
from ._engine import Database, finish_uncancelled
from ._messages import PendingAppend, apply_appends, apply_appends_sqlite, encode
from ._outputs import OutputFile
from .models import Message, NewMessage, UsageRecord

T = TypeVar("T")


class Writer:
    """Serialises the writes of one ``Store`` (one writer per process and database)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.lock = asyncio.Lock()
        self._pending: list[PendingAppend] = []

    async def run(self, fn: Callable[[AsyncConnection], Awaitable[T]], *, where: str) -> T:
        """One write transaction, serialised with every other write of this process, finished
        even if the caller is cancelled once it has started."""
        async with self.lock:
            return await finish_uncancelled(self.db.write(fn, where=where))

    async def terminal(self, fn: Callable[[AsyncConnection], Awaitable[T]], *, where: str) -> T:
        """``run``, shielded from the caller's cancellation while it waits for the lock too:
        a terminal status must never be skipped because its task was cancelled."""
        return await finish_uncancelled(self.run(fn, where=where))

    async def append(
        self,
        thread_id: str,
        msgs: Sequence[NewMessage],
        *,
        usage: UsageRecord | None,
        lease_owner: str | None,
        output_files: Mapping[str, OutputFile] | None,
    ) -> list[Message]:
        """Queue one append for the next group commit and wait until it is committed (or
        refused: its error is raised here, and the others of its batch still commit)."""
        loop = asyncio.get_running_loop()
        item = PendingAppend(
            thread_id, msgs, usage, loop.create_future(), lease_owner, output_files
        )
        if self.db.appender is not None and not _outputs.needs_apart(msgs, output_files):
            item.encoded = encode(msgs)  # while the transaction before it runs
        item.future.add_done_callback(_consume)
        self._pending.append(item)
        try:
            async with self.lock:
                if not item.future.done() and self._pending:
                    taken, self._pending = self._pending, []
                    await finish_uncancelled(self._commit(taken))
        except asyncio.CancelledError:
            if item in self._pending:  # never taken: it will not be written later either
                self._pending.remove(item)
            raise
        return item.future.result()

    async def _commit(self, batch: list[PendingAppend]) -> None:
        where = "appending messages"
        try:
            if all(p.encoded is not None for p in batch):
                outcomes = await self.db.write_sqlite(
                    lambda c: apply_appends_sqlite(c, batch), where=where
                )
            else:  # PostgreSQL, or outputs stored apart (streamed through the ORM connection)
                outcomes = await self.db.write(lambda c: apply_appends(c, batch), where=where)
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


def _consume(fut: asyncio.Future[Any]) -> None:
    # an append whose caller was cancelled may still fail later; don't log "never retrieved"
    if not fut.cancelled():
        fut.exception()
