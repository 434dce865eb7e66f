"""The transport of a SQLite file: plain ``sqlite3``, standard library only.

Every statement of the store is written once against the small transaction interface ``Tx``
(``execute``, ``executemany``, ``fetchone``, ``fetchall``, named ``:parameters``); ``SqliteTx``
runs it on a ``sqlite3`` connection, and ``store._engine`` runs it through SQLAlchemy's
``run_sync`` for PostgreSQL (and a SQLite database named by a ``file:`` URI). ``Database``
chooses once, when it opens. The threads that own a file's connections (its writer, its
readers, the writer queue between processes) are ``store._sqlitefile``'s.

Nothing here imports SQLAlchemy, pydantic or asyncio: the CLI's read-only fast path reads
through ``SqliteTx`` too.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
from collections.abc import Generator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000

Params = Mapping[str, Any] | None
Row = Sequence[Any]


class LockTimeout(Exception):
    """A row lock waited for longer than the transaction's ``lock_timeout`` (PostgreSQL)."""


class Later(Exception):
    """Raised by a read run on the event loop's thread (``ReaderPool.inline``) that turns out too
    large to finish there: it is run again in the reader's pool."""


class Tx:
    """One transaction, as every statement of the store sees it. ``postgres``: the dialect, for
    the few statements that differ (placeholders never do: ``:name`` everywhere)."""

    postgres = False

    def execute(self, sql: str, params: Params = None) -> int:
        """Run one statement; the number of rows it changed."""
        raise NotImplementedError

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        raise NotImplementedError

    def fetchone(self, sql: str, params: Params = None) -> Row | None:
        raise NotImplementedError

    def fetchall(self, sql: str, params: Params = None) -> list[Row]:
        raise NotImplementedError

    def fetch_each(self, sql: str, params: Sequence[Params]) -> Generator[Row | None]:
        """``fetchone(sql, p)`` for each ``p`` of ``params``, in order. Use nothing else of the
        transaction until the iterator is done or closed (``contextlib.closing``)."""
        for p in params:
            yield self.fetchone(sql, p)

    def time(self, when: datetime) -> Any:
        """``when`` (UTC) as a parameter: SQLite keeps naive UTC text (what SQLAlchemy wrote
        there, so older rows compare alike), PostgreSQL a ``timestamptz``."""
        return sqlite_time(when)

    def guarded(self, sql: str, params: Params = None) -> bool:
        """``execute`` inside a savepoint: False, and nothing changed, when it fails."""
        raise NotImplementedError


class SqliteTx(Tx):
    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Params = None) -> int:
        return self.conn.execute(sql, params or {}).rowcount

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.conn.executemany(sql, rows)

    def fetchone(self, sql: str, params: Params = None) -> Row | None:
        row: Row | None = self.conn.execute(sql, params or {}).fetchone()
        return row

    def fetchall(self, sql: str, params: Params = None) -> list[Row]:
        return self.conn.execute(sql, params or {}).fetchall()

    def fetch_each(self, sql: str, params: Sequence[Params]) -> Generator[Row | None]:
        """``Tx.fetch_each``, fetched ahead on a helper thread: ``sqlite3`` lets go of the GIL
        while SQLite steps, so SQLite reading row k + 1 overlaps the caller's work on row k (a
        20,000-message history, read in 20 chunks: ~10 ms of its ~45 were SQLite's, and most of
        them now overlap the build, ``tests/benchmarks/bench_peer.py``). At most ``AHEAD`` rows
        wait; the connection is the helper's alone until the iterator is done or closed, which
        stops the helper and waits for it. An error of SQLite's is raised where its row would
        have been."""
        if len(params) < 2:
            yield from Tx.fetch_each(self, sql, params)
            return
        rows: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=AHEAD)
        stop = threading.Event()

        def fetch() -> None:
            try:
                for p in params:
                    row = self.conn.execute(sql, p or {}).fetchone()
                    if stop.is_set():
                        return
                    rows.put((True, row))
            except BaseException as err:  # handed to the caller's thread, raised there
                rows.put((False, err))

        helper = threading.Thread(target=fetch, name="tl-fetch-ahead", daemon=True)
        helper.start()
        try:
            for _ in params:
                ok, row = rows.get()
                if not ok:
                    raise row
                yield row
        finally:
            stop.set()
            while helper.is_alive():  # a helper blocked on a full queue: make room, then wait
                try:
                    rows.get_nowait()
                except queue.Empty:
                    helper.join(0.01)

    def guarded(self, sql: str, params: Params = None) -> bool:
        self.conn.execute("SAVEPOINT tl_guarded")
        try:
            self.conn.execute(sql, params or {})
        except sqlite3.Error:
            self.conn.execute("ROLLBACK TO tl_guarded")
            return False
        finally:
            self.conn.execute("RELEASE tl_guarded")
        return True


AHEAD = 4
"""Rows ``SqliteTx.fetch_each`` may hold fetched ahead of its caller."""

MAX_ROWS = 1 << 40
"""The most rows a listing or a search returns whatever limit it is given: more than any
database holds, and within SQLite's (and PostgreSQL's) 64-bit integers once the readers have
added their one or two."""


def row_limit(limit: int | None) -> int | None:
    """``limit`` kept within ``MAX_ROWS`` (a limit of 2**63 was an OverflowError)."""
    return None if limit is None else min(limit, MAX_ROWS)


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(when: datetime) -> datetime:
    """An aware UTC datetime (a naive one is taken to be UTC already)."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def sqlite_time(when: datetime) -> str:
    """A UTC datetime as SQLite keeps it (naive UTC text, as SQLAlchemy stored it)."""
    return f"{when:%Y-%m-%d %H:%M:%S.%f}"


def json_value(value: Any) -> Any:
    """A JSON column as read: SQLite hands back its text, PostgreSQL's driver the decoded value
    (none of the store's JSON columns holds a bare string, so a string is always text)."""
    return json.loads(value) if isinstance(value, str) else value


def as_time(value: Any) -> datetime:
    """A stored timestamp (SQLite's naive UTC text, or PostgreSQL's datetime) as aware UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"a stored timestamp that is not one: {value!r}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
