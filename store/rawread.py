"""Read-only reads of a SQLite database with the standard library alone: the fast path of
``threadloom ls``, ``show``, ``search`` and ``tree``.

Those commands spent ~1 s importing SQLAlchemy, pydantic and structlog to run a few indexed
queries. This module runs the store's own statements (``_threads``, ``_history``, ``_search``,
``_schema``) on one read-only ``sqlite3`` connection (``file:…?mode=ro``, a busy timeout, one
deferred transaction: a consistent WAL snapshot that never blocks a writer) and returns the
store's own models (``store.models``, which import none of those libraries): the same rows
become the same objects on both paths, and the same rendering code serves both.

It refuses (``Unsupported``; the caller falls back to the full path) only a database that is
not a file at the newest schema revision (``SCHEMA_HEAD``): the full path creates or migrates
it. A stored value of a shape the store does not write is validated as the full path
validates it, with the same error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from . import _search, _threads
from ._history import History
from ._ledger import UsageTotal, totals
from ._liveness import as_seen
from ._schema import SCHEMA_HEAD, revision
from ._sqlite import BUSY_TIMEOUT_MS, SqliteTx
from .errors import ThreadNotFound
from .models import Message, SearchHit, ThreadInfo
from .refs import ThreadRef, anchor_range, format_ref, shortest_refs


class Unsupported(Exception):
    """This database cannot be read here: the full path creates, migrates or reports it."""


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
        found = revision(SqliteTx(conn))
    except sqlite3.Error as err:
        conn.close()
        raise Unsupported(f"{path}: no readable schema version ({err})") from err
    if found != SCHEMA_HEAD:
        conn.close()
        raise Unsupported(f"{path}: schema {found!r} is not at {SCHEMA_HEAD}")
    return conn


# ----------------------------------------------------------------- threads


def get_thread(conn: sqlite3.Connection, thread_id: str) -> ThreadInfo:
    """``Store.get_thread``."""
    return as_seen(_threads.get(SqliteTx(conn), thread_id))


def list_threads(
    conn: sqlite3.Connection,
    *,
    job_id: str | None = None,
    status: str | None = None,
    kind: str | None = None,
    limit: int | None = None,
    oldest_first: bool = False,
    prompts: bool = True,
) -> list[ThreadInfo]:
    """``Store.list_threads``: newest first (or oldest), as readers see them."""
    return _threads.listing(
        SqliteTx(conn),
        job_id=job_id,
        status=status,
        kind=kind,
        limit=limit,
        oldest_first=oldest_first,
        prompts=prompts,
    )


def job_tree(conn: sqlite3.Connection, job_id: str) -> list[ThreadInfo]:
    """``Store.job_tree``: every thread of a job, oldest first."""
    return list_threads(conn, job_id=job_id, oldest_first=True, prompts=False)


def resolve(conn: sqlite3.Connection, ref: str) -> tuple[ThreadInfo, int | None, int | None]:
    """``Store.resolve``: (thread, start, end) — the same errors, word for word."""
    parsed = ThreadRef.parse(ref)
    row = _threads.thread_row(SqliteTx(conn), parsed.id, suffix=parsed.suffix)
    info = as_seen(_threads.thread_from_row(row))
    start, end = anchor_range(parsed, info.id, info.head_seq)
    return info, start, end


def short_refs(conn: sqlite3.Connection, thread_ids: Sequence[str]) -> dict[str, str]:
    """``Store.short_refs``: the shortest unique ref by its end of each id."""
    if not thread_ids:
        return {}
    return shortest_refs(thread_ids, _threads.every_id(SqliteTx(conn)))


def job_of(conn: sqlite3.Connection, ref: str) -> ThreadInfo:
    """The lead thread of the job around ``ref`` (``_cmd_read.job_of``)."""
    info = resolve(conn, ref)[0]
    return info if info.job_id == info.id else get_thread(conn, info.job_id)


# ----------------------------------------------------------------- messages


def messages(
    conn: sqlite3.Connection, thread_id: str, *, start: int = 1, end: int | None = None
) -> list[Message]:
    """``Store.messages``: the visible history across the fork chain, or ``start..end``."""
    return History().read_range(SqliteTx(conn), thread_id, start, end)


def message(conn: sqlite3.Connection, thread_id: str, seq: int) -> Message:
    """``Store.message``."""
    found = messages(conn, thread_id, start=seq, end=seq)
    if not found:
        raise ThreadNotFound(f"{format_ref(thread_id)} has no message #{seq}")
    return found[0]


def usage_totals(
    conn: sqlite3.Connection, *, thread_id: str | None = None, job_id: str | None = None
) -> list[UsageTotal]:
    """``store.usage.totals``: the store's own statement."""
    return totals(SqliteTx(conn), thread_id=thread_id, job_id=job_id)


def search(
    conn: sqlite3.Connection, query: str, *, job_id: str | None = None, limit: int = 20
) -> list[SearchHit]:
    """``Store.search`` on SQLite: the same statement, so the same hits, order and snippets."""
    return _search.search(SqliteTx(conn), query, job_id=job_id, limit=limit)


__all__ = [
    "Unsupported",
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
