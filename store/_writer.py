"""The process's one writer: every write transaction of a ``Store`` goes through it.

Writes are serialised on one lock. Appends are group-committed: appends that arrive while a
transaction is running are written together in the next one (one transaction, one multi-row
insert per table), and each caller's await returns only after the transaction holding its
messages has committed. Other writes run one transaction each. Once a transaction has started it
is finished even if its caller is cancelled; a terminal write (``terminal=True``) is shielded
while it waits for the lock, too. The statements are functions of a ``Tx``
(``store._sqlite``); ``Database.write`` runs them on whichever transport it chose.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ._engine import Database, finish_uncancelled
from ._messages import PendingAppend, apply_appends, encode
from ._outputs import OutputFile, needs_apart
from ._sqlite import Tx
from .models import Message, NewMessage, UsageRecord

T = TypeVar("T")


class Writer:
    """Serialises the writes of one ``Store`` (one writer per process and database)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.lock = asyncio.Lock()
        self._pending: list[PendingAppend] = []

    async def run(self, fn: Callable[[Tx], T], *, where: str, terminal: bool = False) -> T:
        """One write transaction, serialised with every other write of this process, finished
        even if the caller is cancelled once it has started. ``terminal``: shielded from the
        caller's cancellation while it waits for the lock too — a terminal status must never be
        skipped because its task was cancelled."""

        async def run() -> T:
            async with self.lock:
                return await finish_uncancelled(self.db.write(fn, where=where))

        return await (finish_uncancelled(run()) if terminal else run())

    async def append(
        self,
        thread_id: str,
        msgs: Sequence[NewMessage],
        *,
        usage: UsageRecord | None,
        lease_owner: str | None,
        output_files: Mapping[str, OutputFile] | None,
        times: Sequence[datetime | None] | None = None,
    ) -> list[Message]:
        """Queue one append for the next group commit and wait until it is committed (or
        refused: its error is raised here, and the others of its batch still commit)."""
        loop = asyncio.get_running_loop()
        item = PendingAppend(
            thread_id, msgs, usage, loop.create_future(), lease_owner, output_files, times=times
        )
        if not needs_apart(msgs, output_files):
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
        try:
            outcomes = await self.db.write(
                lambda tx: apply_appends(tx, batch), where="appending messages"
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


def _consume(fut: asyncio.Future[Any]) -> None:
    # an append whose caller was cancelled may still fail later; don't log "never retrieved"
    if not fut.cancelled():
        fut.exception()
