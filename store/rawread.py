"""Read-only reads of a SQLite database with the standard library alone: the fast path of
``threadloom ls``, ``show``, ``search`` and ``tree``.

Those commands spent ~1 s importing SQLAlchemy, pydantic and structlog to run a few indexed
queries. This module answers the same questions through one read-only ``sqlite3`` connection
(``file:…?mode=ro``, a busy timeout, one deferred transaction: a consistent WAL snapshot that
never blocks a writer) and returns plain objects with the attribute names of the store's models
(``ThreadInfo``, ``Message``, the content blocks, ``Result``, ``Usage``: ``store._rawmodels``),
so the same rendering code serves both paths. Nothing here imports SQLAlchemy, pydantic or
structlog.

It answers only what it can answer exactly as the full store would; anything else raises
``Unsupported`` and the caller falls back to the full path:

- the database is not a file at the newest schema revision (``SCHEMA_HEAD``): the full path
  creates or migrates it;
- a stored value this module does not know the exact shape of (a block type or key, a result
  key, a status, a timestamp format): the pydantic models would normalise it, this module
  does not guess. ``LIGHT_SHAPES`` lists the shapes it knows; a test holds it to the models.

The rules are the store's, shared rather than copied: the liveness rule
(``_liveness.lease_gone``), ref parsing and id prefixes (``refs``), the fork-chain segments, their
SQL and the FTS5 query syntax and search statement (``_readsql``).

A public module of the store (the CLI's fast path reads through it), with its plain shapes:
what it returns and raises is named here, never in ``_rawmodels``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from . import _readsql
from ._liveness import lease_gone
from ._rawmodels import (
    RawFork,
    RawHit,
    RawMessage,
    RawResult,
    RawThread,
    RawUsage,
    RawUsageTotal,
    Unsupported,
    block_from_json,
    json_or_none,
    result_from_json,
    stamp,
    strs,
)
from ._readsql import CHAIN_SQL, MESSAGES_SQL, THREAD_SELECT, fts5_rows, row_limit, segments
from ._schema import SCHEMA_HEAD
from ._sqlite import BUSY_TIMEOUT_MS, SqliteTx
from .errors import ThreadNotFound
from .refs import ThreadRef, anchor_range, format_ref, shortest_refs

KINDS = ("lead", "worker", "reader")
STATUSES = ("idle", "queued", "running", "done", "failed", "interrupted", "cancelled")


# ----------------------------------------------------------------- opening


def open_at_head(path: Path) -> sqlite3.Connection:
    """A read-only connection to the database file ``path``, inside a read transaction, after
    checking its schema is at ``SCHEMA_HEAD``. ``Unsupported`` when it is not (or cannot be
    opened read-only): the full path creates, migrates or reports it."""
    uri = f"file:{quote(str(path))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as err:
        raise Unsupported(f"cannot open {path} read-only: {err}") from err
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA query_only = ON")
        conn.execute("BEGIN")
        found = _readsql.revision(SqliteTx(conn))
    except sqlite3.Error as err:
        conn.close()
        raise Unsupported(f"{path}: no readable schema version ({err})") from err
    if found != SCHEMA_HEAD:
        conn.close()
        raise Unsupported(f"{path}: schema {found!r} is not at {SCHEMA_HEAD}")
    return conn


# ----------------------------------------------------------------- threads


def _thread(row: Sequence[Any]) -> RawThread:
    tid, kind, title, status, parent, forked_id, forked_at, job, task, prompt, tools = row[:11]
    model, result, error, version, head, owner, expires, created, updated = row[11:20]
    continues, continued_by = row[20:22]
    if kind not in KINDS or status not in STATUSES:
        raise Unsupported(f"kind {kind!r} / status {status!r}")
    if forked_id is not None and forked_at is None:
        raise Unsupported("a fork without its point")
    result_json = json_or_none(result)
    task_json = json_or_none(task)
    if task_json is not None and not isinstance(task_json, dict):
        raise Unsupported("task")
    return RawThread(
        id=tid,
        kind=kind,
        title=title or "",
        status=status,
        parent_id=parent,
        forked_from=RawFork(forked_id, int(forked_at)) if forked_id else None,
        job_id=job,
        task=task_json,
        system_prompt=prompt,
        tools=strs(json_or_none(tools) or []),
        model=model,
        result=result_from_json(result_json) if result_json else None,
        error=error,
        version=int(version),
        head_seq=int(head),
        lease_owner=owner,
        lease_expires_at=None if expires is None else stamp(expires),
        created_at=stamp(created),
        updated_at=stamp(updated),
        continues=continues,
        continued_by=continued_by,
    )


def as_seen(info: RawThread, now: datetime | None = None) -> RawThread:
    """``info`` as readers see it: ``running`` with its runner gone reads ``interrupted``."""
    if lease_gone(info.status, info.lease_owner, info.lease_expires_at, now):
        return info.with_status("interrupted")
    return info


def get_thread(conn: sqlite3.Connection, thread_id: str) -> RawThread:
    """``Store.get_thread``."""
    return as_seen(_thread(_readsql.thread_row(SqliteTx(conn), thread_id)))


def list_threads(
    conn: sqlite3.Connection,
    *,
    job_id: str | None = None,
    status: str | None = None,
    kind: str | None = None,
    limit: int | None = None,
    oldest_first: bool = False,
) -> list[RawThread]:
    """``Store.list_threads``: newest first (or oldest), as readers see them."""
    where: list[str] = []
    params: list[Any] = []
    if job_id is not None:
        where.append("job_id = ?")
        params.append(job_id)
    # ``running`` and ``interrupted`` depend on whether the runner lives: fetch both, then
    # filter (and limit) on what readers see
    live_dependent = status in ("running", "interrupted")
    if live_dependent:
        where.append("status IN ('running', 'interrupted')")
    elif status is not None:
        where.append("status = ?")
        params.append(status)
    if kind is not None:
        where.append("kind = ?")
        params.append(kind)
    sql = THREAD_SELECT + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY id" + ("" if oldest_first else " DESC")
    limit = row_limit(limit)
    if limit is not None and not live_dependent:
        sql += " LIMIT ?"
        params.append(limit)
    now = datetime.now(UTC)
    found = [as_seen(_thread(r), now) for r in conn.execute(sql, params)]
    if live_dependent:
        found = [t for t in found if t.status == status]
        if limit is not None:
            found = found[:limit]
    return found


def job_tree(conn: sqlite3.Connection, job_id: str) -> list[RawThread]:
    """``Store.job_tree``: every thread of a job, oldest first."""
    return list_threads(conn, job_id=job_id, oldest_first=True)


def resolve(conn: sqlite3.Connection, ref: str) -> tuple[RawThread, int | None, int | None]:
    """``Store.resolve``: (thread, start, end) — the same errors, word for word."""
    parsed = ThreadRef.parse(ref)
    row = _readsql.thread_row(SqliteTx(conn), parsed.id, suffix=parsed.suffix)
    info = as_seen(_thread(row))
    start, end = anchor_range(parsed, info.id, info.head_seq)
    return info, start, end


def short_refs(conn: sqlite3.Connection, thread_ids: Sequence[str]) -> dict[str, str]:
    """``Store.short_refs``: the shortest unique ref by its end of each id."""
    if not thread_ids:
        return {}
    return shortest_refs(thread_ids, _readsql.every_id(SqliteTx(conn)))


def job_of(conn: sqlite3.Connection, ref: str) -> RawThread:
    """The lead thread of the job around ``ref`` (``_cmd_read.job_of``)."""
    info = resolve(conn, ref)[0]
    return info if info.job_id == info.id else get_thread(conn, info.job_id)


# ----------------------------------------------------------------- messages


def messages(
    conn: sqlite3.Connection, thread_id: str, *, start: int = 1, end: int | None = None
) -> list[RawMessage]:
    """``Store.messages``: the visible history across the fork chain, or ``start..end``."""
    chain_rows = conn.execute(CHAIN_SQL, {"id": thread_id}).fetchall()
    if not chain_rows:
        raise ThreadNotFound(f"no thread {format_ref(thread_id)}")
    head = int(chain_rows[0][2])
    chain = [(str(r[0]), int(r[1])) for r in chain_rows]
    out: list[RawMessage] = []
    for owner, lo, hi in segments(head, chain, start, end):
        for tid, seq, role, content, created in conn.execute(
            MESSAGES_SQL, {"owner": owner, "lo": lo, "hi": hi}
        ):
            if role not in ("user", "assistant"):
                raise Unsupported(f"role {role!r}")
            blocks = json.loads(content)
            if not isinstance(blocks, list) or not blocks:
                raise Unsupported("message content")
            content_blocks = [block_from_json(b) for b in blocks]
            out.append(RawMessage(tid, int(seq), role, content_blocks, stamp(created)))
    return out


def message(conn: sqlite3.Connection, thread_id: str, seq: int) -> RawMessage:
    """``Store.message``."""
    found = messages(conn, thread_id, start=seq, end=seq)
    if not found:
        raise ThreadNotFound(f"{format_ref(thread_id)} has no message #{seq}")
    return found[0]


# ----------------------------------------------------------------- usage


def usage_totals(
    conn: sqlite3.Connection, *, thread_id: str | None = None, job_id: str | None = None
) -> list[RawUsageTotal]:
    """``store.usage.totals``: the store's own statement (``_readsql.usage_totals``)."""
    return [
        RawUsageTotal(tid, RawUsage(*sums[:4]), sums[4], sums[5])
        for tid, *sums in _readsql.usage_totals(SqliteTx(conn), thread_id=thread_id, job_id=job_id)
    ]


# ----------------------------------------------------------------- search


def search(
    conn: sqlite3.Connection, query: str, *, job_id: str | None = None, limit: int = 20
) -> list[RawHit]:
    """``Store.search`` on SQLite: the same statements, so the same hits, order and snippets."""
    hits = []
    rows = fts5_rows(
        lambda sql, p: conn.execute(sql, p).fetchall(), query, job_id=job_id, limit=limit
    )
    for thread_id, seq, role, snip, marks in rows:
        if role not in ("user", "assistant"):
            raise Unsupported(f"role {role!r}")
        hits.append(RawHit(thread_id, seq, snip, role, marks))
    return hits


__all__ = [
    "KINDS",
    "STATUSES",
    "RawMessage",
    "RawResult",
    "RawThread",
    "RawUsage",
    "Unsupported",
    "as_seen",
    "get_thread",
    "job_of",
    "job_tree",
    "list_threads",
    "message",
    "messages",
    "open_at_head",
    "resolve",
    "search",
    "short_refs",
    "usage_totals",
]
