"""Dispatches (``store.dispatches``): a lead's ``tool_use`` id and task index → the worker thread
run for it. Unique together, so replaying a lead turn can never spawn a worker twice; it is also
the queue that lets workers run in other processes later."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import _messages, _threads
from ._invariants import check_append
from ._sqlite import Tx, utcnow
from .models import Kind, NewMessage, Result, Status, ThreadInfo
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


@dataclass(frozen=True, slots=True)
class NewWorker:
    """One task of a ``SpawnRequest``: its place in the dispatch (``index``), its id in the job
    (``key``) and its worker thread as stored. ``id`` is chosen here unless given (a worker's
    system prompt names its own ref)."""

    index: int
    key: str | None = None
    title: str = ""
    task: Mapping[str, Any] | None = None
    system_prompt: str | None = None
    tools: tuple[str, ...] = ()
    model: str | None = None
    messages: tuple[NewMessage, ...] = ()
    id: str = field(default_factory=new_id)


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    """One dispatch: the workers of a lead's call, keyed by the lead and the call's
    ``tool_use_id`` (with each task's index), so that a replay of the call finds its workers
    instead of starting them again. Built once, where the call is made, and stored as given
    (``Dispatches.spawn``)."""

    lead_id: str
    tool_use_id: str
    workers: tuple[NewWorker, ...]


def spawn(
    tx: Tx, now: datetime, lead_id: str, tool_use_id: str, w: NewWorker
) -> tuple[ThreadInfo, bool]:
    """The worker of one task of a lead's ``tool_use`` with its dispatch row, or the worker
    that dispatch already has: (thread, created)."""
    key = {"lead": lead_id, "tool_use": tool_use_id, "index": w.index}
    row = tx.fetchone(
        "SELECT worker_id FROM dispatches WHERE lead_id = :lead AND tool_use_id = :tool_use"
        " AND task_index = :index",
        key,
    )
    if row is not None:
        return _threads.get(tx, row[0]), False
    job, status = _threads.job_of(tx, lead_id), str(Status.QUEUED)
    _messages.new_thread(
        tx, now, w.messages, id=w.id, kind=str(Kind.WORKER), title=w.title,
        task=dict(w.task) if w.task is not None else None, system_prompt=w.system_prompt,
        tools=list(w.tools), model=w.model, status=status, parent_id=lead_id, job_id=job,
    )  # fmt: skip
    stamp = tx.time(now)
    tx.execute(
        "INSERT INTO dispatches (lead_id, tool_use_id, task_index, task_key, worker_id, status,"
        " created_at, updated_at) VALUES (:lead, :tool_use, :index, :task_key, :worker, :status,"
        " :now, :now)",
        {**key, "task_key": w.key, "worker": w.id, "status": status, "now": stamp},
    )
    return _threads.get(tx, w.id), True


def set_status(tx: Tx, worker_id: str, status: str, now: datetime) -> None:
    tx.execute(
        "UPDATE dispatches SET status = :status, updated_at = :now WHERE worker_id = :worker",
        {"status": status, "now": tx.time(now), "worker": worker_id},
    )


def finish(
    tx: Tx,
    thread_id: str,
    owner: str,
    status: Status,
    *,
    now: datetime,
    error: str | None,
    result: Result | None,
) -> ThreadInfo:
    """``Store.finish``'s transaction: the terminal status under the lease (``LeaseLost``
    writes nothing), the lease released, the thread's dispatch row (if any) marked."""
    info = _threads.set_status(
        tx, thread_id, status, now=now, error=error, result=result, lease_owner=owner
    )
    _threads.release_lease(tx, thread_id, owner)
    set_status(tx, thread_id, str(status), now)
    return info


def hand_off(
    tx: Tx,
    thread_id: str,
    owner: str,
    *,
    now: datetime,
    result: Result | None,
    successor: Mapping[str, Any],
    messages: Sequence[NewMessage],
) -> ThreadInfo:
    """``Store.hand_off``'s transaction: the thread ``owner`` runs ends ``done`` (under its
    lease: ``LeaseLost`` writes nothing), its successor — same job, kind, parent, title and
    model unless ``successor`` says otherwise — starts ``queued`` with ``continues_id`` and its
    first ``messages``, and the dispatch row of the task moves to it (the job sees one task).

    A thread continued already (the unique index on ``continues_id``) is not continued again:
    its successor is returned and nothing is written."""
    found = tx.fetchone("SELECT id FROM threads WHERE continues_id = :id", {"id": thread_id})
    if found is not None:
        return _threads.get(tx, found[0])
    before = _threads.set_status(
        tx, thread_id, Status.DONE, now=now, result=result, lease_owner=owner
    )
    _threads.release_lease(tx, thread_id, owner)
    values = {
        "kind": str(before.kind),
        "title": before.title,
        "parent_id": before.parent_id,
        "job_id": before.job_id,
        "task": before.task,
        "system_prompt": before.system_prompt,
        "tools": list(before.tools),
        "model": before.model,
        **successor,
        "status": str(Status.QUEUED),
        "continues_id": thread_id,
    }
    _messages.new_thread(tx, now, messages, **values)
    tx.execute(
        "UPDATE dispatches SET worker_id = :new, updated_at = :now WHERE worker_id = :old",
        {"new": values["id"], "old": thread_id, "now": tx.time(now)},
    )
    return _threads.get(tx, values["id"])


_DISPATCH_COLUMNS = "d.lead_id, d.tool_use_id, d.task_index, d.task_key, d.worker_id, d.status"


def of_job(tx: Tx, job_id: str) -> list[Dispatch]:
    """Every dispatch of a job, whichever of its leads (a handoff's chain) made it, in order."""
    rows = tx.fetchall(
        f"SELECT {_DISPATCH_COLUMNS} FROM dispatches d JOIN threads t ON t.id = d.lead_id"
        " WHERE t.job_id = :job ORDER BY d.id",
        {"job": job_id},
    )
    return [Dispatch(*r) for r in rows]


def of_lead(tx: Tx, lead_id: str, tool_use_id: str | None) -> list[Dispatch]:
    sql = (
        "SELECT lead_id, tool_use_id, task_index, task_key, worker_id, status FROM dispatches"
        " WHERE lead_id = :lead"
    )
    if tool_use_id is not None:
        sql += " AND tool_use_id = :tool_use"
    rows = tx.fetchall(sql + " ORDER BY id", {"lead": lead_id, "tool_use": tool_use_id})
    return [Dispatch(*r) for r in rows]


class Dispatches:
    """``store.dispatches``: spawn a lead's worker once, list them, track their status."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def spawn(self, request: SpawnRequest) -> list[tuple[ThreadInfo, bool]]:
        """The worker thread of each task of ``request``, in one transaction (a 100-task
        dispatch is one commit, not 100): created with its dispatch row, or — when that
        dispatch exists already (a replayed lead turn) — the existing worker. Returns
        (thread, created) per task, in order."""
        for w in request.workers:
            check_append((), 0, w.messages)  # refused before anything is written
        now, lead, call = utcnow(), request.lead_id, request.tool_use_id

        def fn(tx: Tx) -> list[tuple[ThreadInfo, bool]]:
            return [spawn(tx, now, lead, call, w) for w in request.workers]

        return await self._writer.run(fn, where="spawning workers")

    async def of_lead(self, lead_id: str, tool_use_id: str | None = None) -> list[Dispatch]:
        """The lead's dispatches (of one ``tool_use`` id), in the order they were made."""
        return await self._writer.db.read(
            lambda tx: of_lead(tx, lead_id, tool_use_id), where="reading dispatches"
        )

    async def of_job(self, job_id: str) -> list[Dispatch]:
        """Every dispatch of the job, by any lead of its handoff chain, in the order made."""
        return await self._writer.db.read(lambda tx: of_job(tx, job_id), where="reading dispatches")

    async def set_status(self, worker_id: str, status: str) -> None:
        now = utcnow()
        await self._writer.run(
            lambda tx: set_status(tx, worker_id, status, now), where="updating a dispatch"
        )
