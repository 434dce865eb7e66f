"""Statements on the ``threads`` table: rows to ``ThreadInfo``, inserting a thread with its first
messages, resolving an id prefix, listing, and the status state machine.

Each function runs inside a transaction its caller opened (``Store``'s writer or a read): they
take the connection and plain values, and hold no state.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from . import _messages
from ._engine import as_utc, utcnow
from ._invariants import check_append
from ._liveness import as_seen
from ._redact import redact
from ._tables import threads
from .errors import AmbiguousRef, LeaseLost, StatusError, ThreadNotFound
from .models import CONTENT_FORMAT, ForkOrigin, Kind, NewMessage, Result, Status, ThreadInfo
from .refs import ThreadRef, format_ref, prefix_upper

THREAD_COLUMNS = list(threads.c)

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


def thread_from_row(row: sa.Row[Any]) -> ThreadInfo:
    return thread_from_mapping(row._mapping)


def thread_from_mapping(m: Mapping[Any, Any]) -> ThreadInfo:
    forked = (
        ForkOrigin(thread_id=m["forked_from_id"], at=m["forked_at_seq"])
        if m["forked_from_id"]
        else None
    )
    return ThreadInfo.model_construct(
        id=m["id"],
        kind=Kind(m["kind"]),
        title=m["title"] or "",
        status=Status(m["status"]),
        parent_id=m["parent_id"],
        forked_from=forked,
        job_id=m["job_id"],
        task=m["task"],
        system_prompt=m["system_prompt"],
        tools=list(m["tools"] or []),
        model=m["model"],
        result=Result.model_validate(m["result"]) if m["result"] else None,
        error=m["error"],
        version=m["version"],
        head_seq=m["head_seq"],
        lease_owner=m["lease_owner"],
        lease_expires_at=as_utc(m["lease_expires_at"]),
        created_at=as_utc(m["created_at"]),
        updated_at=as_utc(m["updated_at"]),
    )


async def get(conn: AsyncConnection, thread_id: str) -> ThreadInfo:
    """The stored row as it is (``Store.get_thread`` presents it as readers see it)."""
    row = (await conn.execute(sa.select(*THREAD_COLUMNS).where(threads.c.id == thread_id))).first()
    if row is None:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    return thread_from_row(row)


async def job_of(conn: AsyncConnection, thread_id: str) -> str:
    row = (await conn.execute(sa.select(threads.c.job_id).where(threads.c.id == thread_id))).first()
    if row is None:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    return str(row[0])


async def insert(
    conn: AsyncConnection,
    now: datetime,
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
    await _messages.insert(conn, values["id"], after_seq + 1, messages, now)


async def create(
    conn: AsyncConnection,
    now: datetime,
    messages: Sequence[NewMessage],
    *,
    job_id: str | None,
    parent_id: str | None,
    **values: Any,
) -> ThreadInfo:
    """A new thread of ``job_id``, else of its parent's job, else a job of its own."""
    job = job_id
    if job is None and parent_id is not None:
        job = await job_of(conn, parent_id)
    await insert(conn, now, messages, parent_id=parent_id, job_id=job or values["id"], **values)
    return await get(conn, values["id"])


def id_prefix_condition(
    column: sa.ColumnElement[str], prefix: str, dialect: str
) -> sa.ColumnElement[bool]:
    """``column`` starts with ``prefix``, whatever the database's collation.

    A half-open range ``[prefix, prefix_upper(prefix))`` compared byte by byte: SQLite compares
    our columns with BINARY (so its primary-key index still serves the range); on PostgreSQL the
    comparison is made ``COLLATE "C"``, since under a linguistic collation (ICU en-US,
    en_US.UTF-8) neither ``'~'`` nor any other character is guaranteed to sort after every id
    character (``id < p || '~'`` matched nothing there)."""
    if not prefix:
        return sa.true()
    col = column.collate("C") if dialect == "postgresql" else column
    return sa.and_(col >= prefix, col < prefix_upper(prefix))


def id_suffix_condition(
    column: sa.ColumnElement[str], suffix: str, dialect: str
) -> sa.ColumnElement[bool]:
    """``column`` ends with ``suffix`` (id characters only, so no LIKE wildcard to escape),
    compared byte by byte (``COLLATE "C"`` on PostgreSQL, as ``id_prefix_condition``). No index
    serves an id's end: the threads table is scanned, which is one row a thread."""
    col = column.collate("C") if dialect == "postgresql" else column
    return col.like("%" + suffix)


async def by_partial(conn: AsyncConnection, ref: ThreadRef, dialect: str) -> ThreadInfo:
    """The one thread whose id starts with ``ref.id`` (or, for a ref by its end, ends with it);
    ``AmbiguousRef`` lists up to ten."""
    cond = (id_suffix_condition if ref.suffix else id_prefix_condition)(
        threads.c.id, ref.id, dialect
    )
    rows = (
        await conn.execute(sa.select(*THREAD_COLUMNS).where(cond).order_by(threads.c.id).limit(11))
    ).all()
    if not rows:
        raise ThreadNotFound(f"no thread matches {ref.thread}")
    if len(rows) > 1:
        cands = [format_ref(r.id) for r in rows[:10]]
        more = " …" if len(rows) > 10 else ""
        raise AmbiguousRef(f"{ref.thread} is ambiguous: {', '.join(cands)}{more}", cands)
    return thread_from_row(rows[0])


async def every_id(conn: AsyncConnection) -> list[str]:
    """Every thread's id (``refs.shortest_refs`` needs them all to know what is unique)."""
    return list((await conn.execute(sa.select(threads.c.id))).scalars())


async def listing(
    conn: AsyncConnection,
    *,
    job_id: str | None,
    status: Status | str | None,
    kind: Kind | str | None,
    parent_id: str | None,
    forked_from_id: str | None,
    limit: int | None,
    oldest_first: bool,
) -> list[ThreadInfo]:
    """``Store.list_threads``: the threads matching every given filter, by id (creation order),
    as readers see them."""
    wanted = None if status is None else Status(status)
    # ``running`` and ``interrupted`` depend on whether the runner lives (``as_seen``): fetch
    # both, present, then filter (and limit) here; running threads are few
    live_dependent = wanted in (Status.RUNNING, Status.INTERRUPTED)
    q = sa.select(*THREAD_COLUMNS)
    if job_id is not None:
        q = q.where(threads.c.job_id == job_id)
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
    now = utcnow()
    found = [as_seen(t, now) for t in await rows(conn, q)]
    if live_dependent:
        found = [t for t in found if t.status == wanted]
        if limit is not None:
            found = found[:limit]
    return found


async def rows(conn: AsyncConnection, query: sa.Select[Any]) -> list[ThreadInfo]:
    return [thread_from_row(r) for r in await conn.execute(query)]


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


async def set_status(
    conn: AsyncConnection,
    thread_id: str,
    status: Status,
    *,
    now: datetime,
    error: str | None,
    result: Result | None,
    expected: set[Status] | None,
    lease_owner: str | None,
) -> ThreadInfo:
    """``Store.set_status`` inside its transaction."""
    info = await get(conn, thread_id)
    if lease_owner is not None:
        _check_lease(info, lease_owner, now)
    if expected is not None and info.status not in expected:
        raise StatusError(f"{info.ref} is {info.status}, expected {' or '.join(sorted(expected))}")
    if info.status == status and status.terminal:
        return info
    if info.status != status and status not in ALLOWED[info.status]:
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
    return await get(conn, thread_id)


async def set_result(
    conn: AsyncConnection, thread_id: str, payload: dict[str, Any], now: datetime
) -> None:
    res = await conn.execute(
        threads.update()
        .where(threads.c.id == thread_id)
        .values(result=payload, updated_at=now, version=threads.c.version + 1)
    )
    if res.rowcount == 0:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")


async def update(
    conn: AsyncConnection, thread_id: str, values: dict[str, Any], now: datetime
) -> ThreadInfo:
    """Metadata edits (never messages); none at all just reads the thread."""
    if values:
        await conn.execute(
            threads.update()
            .where(threads.c.id == thread_id)
            .values(**values, updated_at=now, version=threads.c.version + 1)
        )
    return await get(conn, thread_id)


async def adopt(conn: AsyncConnection, thread_id: str, parent_id: str, now: datetime) -> ThreadInfo:
    """Hang a thread that has no parent under ``parent_id``: its parent becomes that thread and
    its job (every thread of it, when it was a job of its own) joins the parent's job. A thread
    that has a parent already, or whose job holds the parent (a cycle), is left as it is."""
    info = await get(conn, thread_id)
    job = await job_of(conn, parent_id)
    if info.parent_id is not None or job == info.job_id:
        return info
    if info.job_id == info.id:  # a job of its own: all of it moves
        await conn.execute(
            threads.update()
            .where(threads.c.job_id == info.id)
            .values(job_id=job, updated_at=now, version=threads.c.version + 1)
        )
    await conn.execute(
        threads.update()
        .where(threads.c.id == thread_id)
        .values(parent_id=parent_id, job_id=job, updated_at=now, version=threads.c.version + 1)
    )
    return await get(conn, thread_id)


# ----------------------------------------------------------------- on the raw sqlite3 writer
# The statements above on ``store._rawwrite``'s connection (a SQLite file's hot path: one
# thread hop per transaction instead of SQLAlchemy's per statement), inside its
# ``BEGIN IMMEDIATE``. They write the text SQLAlchemy writes, so either path reads what the
# other wrote: JSON columns as ``json.dumps`` of the value (``None`` given is JSON ``null``),
# datetimes as naive UTC text (``_messages.sqlite_time``).

_NAMES = [c.name for c in THREAD_COLUMNS]
_JSON = frozenset(c.name for c in THREAD_COLUMNS if isinstance(c.type, sa.JSON))
_TIMES = frozenset(c.name for c in THREAD_COLUMNS if isinstance(c.type, sa.DateTime))
_SELECT_SQLITE = f"SELECT {', '.join(_NAMES)} FROM threads WHERE id = ?"


def _to_sqlite(name: str, value: Any) -> Any:
    if name in _JSON:
        return json.dumps(value)
    if name in _TIMES and value is not None:
        return _messages.sqlite_time(value)
    return value


def thread_from_sqlite(row: Sequence[Any]) -> ThreadInfo:
    """``thread_from_row`` for a raw row of ``_SELECT_SQLITE``'s columns."""
    m: dict[str, Any] = {}
    for name, value in zip(_NAMES, row, strict=True):
        if value is not None and name in _JSON:
            value = json.loads(value)
        elif value is not None and name in _TIMES:
            value = datetime.fromisoformat(value)
        m[name] = value
    return thread_from_mapping(m)


def get_sqlite(conn: sqlite3.Connection, thread_id: str) -> ThreadInfo:
    """``get`` on the raw writer's connection."""
    row = conn.execute(_SELECT_SQLITE, (thread_id,)).fetchone()
    if row is None:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    return thread_from_sqlite(row)


def job_of_sqlite(conn: sqlite3.Connection, thread_id: str) -> str:
    row = conn.execute("SELECT job_id FROM threads WHERE id = ?", (thread_id,)).fetchone()
    if row is None:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    return str(row[0])


def insert_sqlite(
    conn: sqlite3.Connection, now: datetime, messages: Sequence[NewMessage], **values: Any
) -> None:
    """``insert`` (no fork point) of a thread whose messages store nothing apart
    (``_outputs.needs_apart``: those go through the ORM connection)."""
    pending = check_append((), 0, messages)
    row = {
        **values,
        "version": 1,
        "head_seq": len(messages),
        "pending_tool_ids": list(pending),
        "created_at": now,
        "updated_at": now,
    }
    conn.execute(
        f"INSERT INTO threads ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
        [_to_sqlite(k, v) for k, v in row.items()],
    )
    if messages:
        tid, stamp = values["id"], _messages.sqlite_time(now)
        encoded = _messages.encode(messages)
        conn.executemany(
            _messages._RAW_INSERT_MESSAGE,
            [
                (tid, seq, m.role, content, CONTENT_FORMAT, stamp)
                for seq, (m, (content, _)) in enumerate(zip(messages, encoded, strict=True), 1)
            ],
        )
        conn.executemany(
            _messages._RAW_INSERT_TEXT,
            [(text, tid, seq) for seq, (_, text) in enumerate(encoded, 1)],
        )


def create_sqlite(
    conn: sqlite3.Connection,
    now: datetime,
    messages: Sequence[NewMessage],
    *,
    job_id: str | None,
    parent_id: str | None,
    **values: Any,
) -> ThreadInfo:
    """``create`` on the raw writer's connection."""
    job = job_id
    if job is None and parent_id is not None:
        job = job_of_sqlite(conn, parent_id)
    insert_sqlite(conn, now, messages, parent_id=parent_id, job_id=job or values["id"], **values)
    return get_sqlite(conn, values["id"])


def set_status_sqlite(
    conn: sqlite3.Connection,
    thread_id: str,
    status: Status,
    *,
    now: datetime,
    error: str | None,
    result: Result | None,
    expected: set[Status] | None,
    lease_owner: str | None,
) -> ThreadInfo:
    """``set_status`` on the raw writer's connection: the same checks, the same row."""
    info = get_sqlite(conn, thread_id)
    if lease_owner is not None:
        _check_lease(info, lease_owner, now)
    if expected is not None and info.status not in expected:
        raise StatusError(f"{info.ref} is {info.status}, expected {' or '.join(sorted(expected))}")
    if info.status == status and status.terminal:
        return info
    if info.status != status and status not in ALLOWED[info.status]:
        raise StatusError(f"{info.ref}: cannot go from {info.status} to {status}")
    stamp = _messages.sqlite_time(now)
    sets = ["status = ?", "updated_at = ?", "version = version + 1"]
    args: list[Any] = [str(status), stamp]
    if error is not None or status in (Status.RUNNING, Status.QUEUED):
        sets.append("error = ?")
        args.append(None if error is None else redact(error))
    if result is not None:
        sets.append("result = ?")
        args.append(json.dumps(result.model_dump(mode="json", exclude_none=True)))
    where = "id = ?"
    args.append(thread_id)
    if lease_owner is not None:
        where += " AND lease_owner = ? AND lease_expires_at > ?"
        args += [lease_owner, stamp]
    done = conn.execute(f"UPDATE threads SET {', '.join(sets)} WHERE {where}", args)
    if lease_owner is not None and done.rowcount == 0:
        raise LeaseLost(
            f"{info.ref}: {lease_owner} no longer holds the lease; status not written",
            info.lease_owner,
        )
    return get_sqlite(conn, thread_id)


def spawn_sqlite(
    conn: sqlite3.Connection,
    now: datetime,
    messages: Sequence[NewMessage],
    *,
    lead_id: str,
    tool_use_id: str,
    task_index: int,
    task_key: str | None,
    **values: Any,
) -> tuple[ThreadInfo, bool]:
    """``_dispatches._spawn`` on the raw writer's connection: the worker of one task of a
    lead's ``tool_use`` with its dispatch row, or the worker that dispatch already has."""
    found = conn.execute(
        "SELECT worker_id FROM dispatches WHERE lead_id = ? AND tool_use_id = ? AND task_index = ?",
        (lead_id, tool_use_id, task_index),
    ).fetchone()
    if found is not None:
        return get_sqlite(conn, found[0]), False
    job, status = job_of_sqlite(conn, lead_id), str(Status.QUEUED)
    stamp = _messages.sqlite_time(now)
    insert_sqlite(conn, now, messages, status=status, parent_id=lead_id, job_id=job, **values)
    conn.execute(
        "INSERT INTO dispatches (lead_id, tool_use_id, task_index, task_key, worker_id, status,"
        " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (lead_id, tool_use_id, task_index, task_key, values["id"], status, stamp, stamp),
    )
    return get_sqlite(conn, values["id"]), True
