"""Dispatches (``store.dispatches``): a lead's ``tool_use`` id and task index → the worker thread
run for it. Unique together, so replaying a lead turn can never spawn a worker twice; it is also
the queue that lets workers run in other processes later."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from . import _threads
from ._engine import utcnow
from ._invariants import check_append
from ._tables import dispatches
from .models import Kind, NewMessage, Status, ThreadInfo
from .refs import new_id

if TYPE_CHECKING:
    from ._writer import Writer


@dataclass(frozen=True, slots=True)
class Dispatch:
    lead_id: str
    tool_use_id: str
    task_index: int
    task_key: str | None
    worker_id: str
    status: str


async def _spawn(
    conn: AsyncConnection,
    now: datetime,
    messages: Sequence[NewMessage],
    *,
    lead_id: str,
    tool_use_id: str,
    task_index: int,
    task_key: str | None,
    **values: Any,
) -> tuple[ThreadInfo, bool]:
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
        return await _threads.get(conn, row.worker_id), False
    job = await _threads.job_of(conn, lead_id)
    status = str(Status.QUEUED)
    await _threads.insert(
        conn, now, messages, status=status, parent_id=lead_id, job_id=job, **values
    )
    await conn.execute(
        dispatches.insert().values(
            lead_id=lead_id,
            tool_use_id=tool_use_id,
            task_index=task_index,
            task_key=task_key,
            worker_id=values["id"],
            status=status,
            created_at=now,
            updated_at=now,
        )
    )
    return await _threads.get(conn, values["id"]), True


async def _dispatches(conn: AsyncConnection, q: sa.Select[Any]) -> list[Dispatch]:
    return [
        Dispatch(r.lead_id, r.tool_use_id, r.task_index, r.task_key, r.worker_id, r.status)
        for r in await conn.execute(q)
    ]


async def _set_status(conn: AsyncConnection, worker_id: str, status: str, now: datetime) -> None:
    await conn.execute(
        dispatches.update()
        .where(dispatches.c.worker_id == worker_id)
        .values(status=status, updated_at=now)
    )


class Dispatches:
    """``store.dispatches``: spawn a lead's worker once, list them, track their status."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

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
        lead turn) — the existing worker. Returns (thread, created). ``thread_id`` lets the
        caller choose the new thread's id (e.g. to name it in the worker's own system prompt)."""
        tid = thread_id or new_id()
        now = utcnow()
        check_append((), 0, messages)
        values = {
            "id": tid,
            "kind": str(kind),
            "title": title,
            "task": task,
            "system_prompt": system_prompt,
            "tools": list(tools),
            "model": model,
        }
        return await self._writer.run(
            lambda c: _spawn(
                c,
                now,
                messages,
                lead_id=lead_id,
                tool_use_id=tool_use_id,
                task_index=task_index,
                task_key=task_key,
                **values,
            ),
            where="spawning a worker",
        )

    async def of_lead(self, lead_id: str, tool_use_id: str | None = None) -> list[Dispatch]:
        """The lead's dispatches (of one ``tool_use`` id), in the order they were made."""
        q = sa.select(dispatches).where(dispatches.c.lead_id == lead_id)
        if tool_use_id is not None:
            q = q.where(dispatches.c.tool_use_id == tool_use_id)
        q = q.order_by(dispatches.c.id)
        return await self._writer.db.read(lambda c: _dispatches(c, q), where="reading dispatches")

    async def set_status(self, worker_id: str, status: str) -> None:
        now = utcnow()
        await self._writer.run(
            lambda c: _set_status(c, worker_id, status, now), where="updating a dispatch"
        )
