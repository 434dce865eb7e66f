"""Statements on the ``threads`` table: rows to ``ThreadInfo``, inserting a thread with its first
messages, resolving an id prefix, listing, and the status state machine.

Each function runs inside a transaction its caller opened (``Tx``: ``Store``'s writer or a
read): they take it and plain values, and hold no state. JSON columns hold ``json.dumps`` of
the value (``None`` given is JSON ``null``, as SQLAlchemy's JSON type wrote it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ._liveness import as_seen
from ._sqlite import Tx, as_time, json_value, row_limit, utcnow
from .errors import AmbiguousRef, LeaseLost, SourceTaken, StatusError, ThreadNotFound
from .models import ForkOrigin, Kind, Result, Status, ThreadInfo
from .refs import format_ref, is_full_id, prefix_upper

THREAD_COLUMNS = (
    "id, kind, title, status, parent_id, forked_from_id, forked_at_seq, job_id, task,"
    " system_prompt, tools, model, result, error, version, head_seq, lease_owner,"
    " lease_expires_at, created_at, updated_at, continues_id,"
    " (SELECT c.id FROM threads c WHERE c.continues_id = threads.id) AS continued_by"
)


THREAD_SELECT = f"SELECT {THREAD_COLUMNS} FROM threads"
"""A thread's row, in ``ThreadInfo``'s field order (``_threads.thread_from_row``); the last
column, the thread that continues it, is found through ``continues_id``'s unique index."""


def thread_row(tx: Any, ident: str, *, suffix: bool = False) -> Sequence[Any]:
    """The ``THREAD_SELECT`` row of the thread ``ident`` names: a full id, or the one thread
    whose id starts with it — with ``suffix``, ends with it (a ref by its end, ``T-…x2p4``)
    (``AmbiguousRef`` lists up to ten; ``ThreadNotFound``).

    A prefix is a half-open range ``[prefix, prefix_upper(prefix))`` compared byte by byte:
    SQLite compares our columns with BINARY (so its primary-key index still serves the range);
    PostgreSQL compares ``COLLATE "C"``, since under a linguistic collation (ICU en-US,
    en_US.UTF-8) neither ``'~'`` nor any other character is guaranteed to sort after every id
    character (``id < p || '~'`` matched nothing there)."""
    if is_full_id(ident):
        rows: list[Sequence[Any]] = tx.fetchall(THREAD_SELECT + " WHERE id = :id", {"id": ident})
        if not rows:
            raise ThreadNotFound(f"no thread {format_ref(ident)}")
        return rows[0]
    col = 'id COLLATE "C"' if tx.postgres else "id"
    if suffix:
        # id characters only, so no LIKE wildcard to escape; no index serves an id's end: the
        # threads table is scanned, one row a thread
        shown = "T-…" + ident
        rows = tx.fetchall(
            f"{THREAD_SELECT} WHERE {col} LIKE :end ORDER BY id LIMIT 11", {"end": "%" + ident}
        )
    else:
        shown = format_ref(ident)
        rows = tx.fetchall(
            f"{THREAD_SELECT} WHERE {col} >= :lo AND {col} < :hi ORDER BY id LIMIT 11",
            {"lo": ident, "hi": prefix_upper(ident)},
        )
    if not rows:
        raise ThreadNotFound(f"no thread matches {shown}")
    if len(rows) > 1:
        cands = [format_ref(r[0]) for r in rows[:10]]
        more = " …" if len(rows) > 10 else ""
        raise AmbiguousRef(f"{shown} is ambiguous: {', '.join(cands)}{more}", cands)
    return rows[0]


def every_id(tx: Any) -> list[str]:
    """Every thread's id (``refs.shortest_refs`` needs them all to know what is unique)."""
    return [str(r[0]) for r in tx.fetchall("SELECT id FROM threads")]


SELECT = THREAD_SELECT
SELECT_BRIEF = THREAD_SELECT.replace(" system_prompt,", " NULL,", 1)
"""``SELECT`` without the system prompts: a listing of a thousand workers reads a thousand
prompts of several kilobytes each, which no listing shows."""
assert SELECT_BRIEF != SELECT
_JSON = frozenset({"task", "tools", "result", "pending_tool_ids"})

ALLOWED: dict[Status, frozenset[Status]] = {
    Status.IDLE: frozenset({Status.QUEUED, Status.RUNNING, Status.CANCELLED}),
    Status.QUEUED: frozenset({Status.RUNNING, Status.CANCELLED, Status.INTERRUPTED, Status.FAILED}),
    Status.RUNNING: frozenset({Status.DONE, Status.FAILED, Status.INTERRUPTED, Status.CANCELLED}),
}
"""The thread state machine: the statuses each status may move to."""
for _terminal in (Status.DONE, Status.FAILED, Status.INTERRUPTED, Status.CANCELLED):
    # a finished thread can be resumed
    ALLOWED[_terminal] = frozenset({Status.QUEUED, Status.RUNNING})
# a run stopped because its user cancelled it: the stop leaves it interrupted, the cancel says why
ALLOWED[Status.INTERRUPTED] |= {Status.CANCELLED}


def thread_from_row(row: Sequence[Any]) -> ThreadInfo:
    """A row of ``SELECT``'s columns as the model (JSON text parsed, times made aware)."""
    tid, kind, title, status, parent, forked_id, forked_at, job, task, prompt, tools = row[:11]
    model, result, error, version, head, owner, expires, created, updated = row[11:20]
    continues, continued_by = row[20:22]
    # the store wrote every value: built without validating them (a thousand-thread job's
    # listing is a thousand of these); only the result's nested shapes are validated
    values = {
        "id": tid,
        "kind": Kind(kind),
        "title": title or "",
        "status": Status(status),
        "parent_id": parent,
        "forked_from": ForkOrigin.trusted({"thread_id": forked_id, "at": int(forked_at)})
        if forked_id
        else None,
        "job_id": job,
        "task": json_value(task),
        "system_prompt": prompt,
        "tools": list(json_value(tools) or []),
        "model": model,
        "result": _result(result),
        "error": error,
        "version": version,
        "head_seq": head,
        "lease_owner": owner,
        "lease_expires_at": None if expires is None else as_time(expires),
        "created_at": as_time(created),
        "updated_at": as_time(updated),
        "continues": continues,
        "continued_by": continued_by,
    }
    return ThreadInfo.trusted(values)


def _result(value: Any) -> Result | None:
    """A ``result`` column as the model: JSON text (SQLite) or a decoded value (PostgreSQL),
    built as the store wrote it (``Model.from_stored``); SQL NULL or JSON ``null`` is None."""
    if isinstance(value, str):
        value = json.loads(value)
    return Result.from_stored(value) if value else None


def get(tx: Tx, thread_id: str) -> ThreadInfo:
    """The stored row as it is (``Store.get_thread`` presents it as readers see it)."""
    row = tx.fetchone(SELECT + " WHERE id = :id", {"id": thread_id})
    if row is None:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    return thread_from_row(row)


def job_of(tx: Tx, thread_id: str) -> str:
    row = tx.fetchone("SELECT job_id FROM threads WHERE id = :id", {"id": thread_id})
    if row is None:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    return str(row[0])


def insert(tx: Tx, now: datetime, *, head_seq: int, pending: Sequence[str], **values: Any) -> None:
    """One thread row (``_messages.new_thread`` writes it with its first messages);
    ``SourceTaken`` when a thread already stands for its ``source_key`` (the column's unique
    index is the guarantee; this names the thread that holds it)."""
    key = values.get("source_key")
    if key is not None:
        held = tx.fetchone("SELECT id FROM threads WHERE source_key = :k", {"k": key})
        if held is not None:
            raise SourceTaken(f"{format_ref(held[0])} already stands for {key}", held[0])
    stamp = tx.time(now)
    row = {
        **values,
        "version": 1,
        "head_seq": head_seq,
        "pending_tool_ids": list(pending),
        "created_at": stamp,
        "updated_at": stamp,
    }
    tx.execute(
        f"INSERT INTO threads ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})",
        {k: json.dumps(v) if k in _JSON else v for k, v in row.items()},
    )


def listing(
    tx: Tx,
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
    """``Store.list_threads``: the threads matching every given filter, by id (creation order),
    as readers see them; ``older_than``: only ids below it (ids sort by creation, compared byte
    by byte: ``COLLATE "C"`` on PostgreSQL, as the prefix lookup); ``prompts`` False: each
    ``system_prompt`` None, not read."""
    wanted = None if status is None else Status(status)
    # ``running`` and ``interrupted`` depend on whether the runner lives (``as_seen``): fetch
    # both, present, then filter (and limit) here; running threads are few
    live_dependent = wanted in (Status.RUNNING, Status.INTERRUPTED)
    params: dict[str, Any] = {
        "job_id": job_id,
        "status": None if wanted is None else str(wanted),
        "kind": None if kind is None else str(Kind(kind)),
        "parent_id": parent_id,
        "forked_from_id": forked_from_id,
    }
    where = [f"{k} = :{k}" for k, v in params.items() if v is not None and k != "status"]
    if live_dependent:
        where.append("status IN ('running', 'interrupted')")
    elif wanted is not None:
        where.append("status = :status")
    if older_than is not None:
        where.append(('id COLLATE "C"' if tx.postgres else "id") + " < :older_than")
        params["older_than"] = older_than
    sql = (SELECT if prompts else SELECT_BRIEF) + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY id" + ("" if oldest_first else " DESC")
    limit = row_limit(limit)
    if limit is not None and not live_dependent:
        sql += " LIMIT :limit"
        params["limit"] = limit
    now = utcnow()
    found = [as_seen(thread_from_row(r), now) for r in tx.fetchall(sql, params)]
    if live_dependent:
        found = [t for t in found if t.status == wanted]
        if limit is not None:
            found = found[:limit]
    return found


def _check_lease(info: ThreadInfo, owner: str, now: datetime) -> None:
    """A status write of a runner that lost its lease is refused as that (``LeaseLost``),
    before any check of the status itself: a late host whose thread another runner has since
    finished was told "cannot go from done to interrupted" instead. (The write's own ``WHERE``
    still guards it in the transaction.)"""
    expires = info.lease_expires_at
    if info.lease_owner != owner or expires is None or expires <= now:
        raise LeaseLost(
            f"{info.ref}: {owner} no longer holds the lease; status not written",
            info.lease_owner,
        )


def set_status(
    tx: Tx,
    thread_id: str,
    status: Status,
    *,
    now: datetime,
    error: str | None = None,
    result: Result | None = None,
    expected: set[Status] | None = None,
    lease_owner: str | None = None,
) -> ThreadInfo:
    """``Store.set_status`` inside its transaction."""
    info = get(tx, thread_id)
    if lease_owner is not None:
        _check_lease(info, lease_owner, now)
    if expected is not None and info.status not in expected:
        raise StatusError(f"{info.ref} is {info.status}, expected {' or '.join(sorted(expected))}")
    if info.status == status and status.terminal:
        return info
    if info.status != status and status not in ALLOWED[info.status]:
        raise StatusError(f"{info.ref}: cannot go from {info.status} to {status}")
    stamp = tx.time(now)
    sets = ["status = :status", "updated_at = :now", "version = version + 1"]
    params: dict[str, Any] = {"status": str(status), "now": stamp, "id": thread_id}
    if error is not None or status in (Status.RUNNING, Status.QUEUED):
        sets.append("error = :error")  # as given: a run masks its secrets before (workers)
        params["error"] = error
    if result is not None:
        sets.append("result = :result")
        params["result"] = json.dumps(result.model_dump(mode="json", exclude_none=True))
    where = "id = :id"
    if lease_owner is not None:
        where += " AND lease_owner = :owner AND lease_expires_at > :now"
        params["owner"] = lease_owner
    done = tx.execute(f"UPDATE threads SET {', '.join(sets)} WHERE {where}", params)
    if lease_owner is not None and done == 0:
        raise LeaseLost(
            f"{info.ref}: {lease_owner} no longer holds the lease; status not written",
            info.lease_owner,
        )
    return get(tx, thread_id)


def update(tx: Tx, thread_id: str, values: dict[str, Any], now: datetime) -> ThreadInfo:
    """Metadata edits (never messages; ``result`` too); none at all just reads the thread.
    ``ThreadNotFound`` when there is no such thread."""
    if values:
        sets = ", ".join(f"{k} = :{k}" for k in values)
        params = {k: json.dumps(v) if k in _JSON else v for k, v in values.items()}
        done = tx.execute(
            f"UPDATE threads SET {sets}, updated_at = :now_, version = version + 1 WHERE id = :id_",
            {**params, "now_": tx.time(now), "id_": thread_id},
        )
        if not done:
            raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    return get(tx, thread_id)


def release_lease(tx: Tx, thread_id: str, owner: str) -> bool:
    """Give up ``owner``'s lease on the thread; False when it held none."""
    return (
        tx.execute(
            "UPDATE threads SET lease_owner = NULL, lease_expires_at = NULL"
            " WHERE id = :id AND lease_owner = :owner",
            {"id": thread_id, "owner": owner},
        )
        == 1
    )


def adopt(tx: Tx, thread_id: str, parent_id: str, now: datetime) -> ThreadInfo:
    """Hang a thread that has no parent under ``parent_id``: its parent becomes that thread and
    its job (every thread of it, when it was a job of its own) joins the parent's job. A thread
    that has a parent already, or whose job holds the parent (a cycle), is left as it is."""
    info = get(tx, thread_id)
    job = job_of(tx, parent_id)
    if info.parent_id is not None or job == info.job_id:
        return info
    params = {"job": job, "now": tx.time(now), "id": thread_id, "parent": parent_id}
    bump = "updated_at = :now, version = version + 1"
    if info.job_id == info.id:  # a job of its own: all of it moves
        tx.execute(f"UPDATE threads SET job_id = :job, {bump} WHERE job_id = :id", params)
    tx.execute(
        f"UPDATE threads SET parent_id = :parent, job_id = :job, {bump} WHERE id = :id", params
    )
    return get(tx, thread_id)
