"""Engines, transactions and the one boundary where driver errors become ``store.errors``.

SQLite: WAL, ``busy_timeout``, foreign keys and ``synchronous=FULL`` set on every connection;
writes go through one writer connection per process and begin with ``BEGIN IMMEDIATE`` (a
deferred read-then-write transaction fails with SQLITE_BUSY at once, whatever the busy timeout);
reads use a small pool of connections in deferred transactions, which in WAL mode are consistent
snapshots that never block the writer. PostgreSQL runs the same code through asyncpg.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ._schema import SCHEMA_HEAD as SCHEMA_HEAD, revision  # where the fast path reads them
from ._sqlite import BUSY_TIMEOUT_MS, LockTimeout, Params, Row, Tx, sqlite_time
from ._sqlitefile import QueueTimeout, ReaderPool, WriteQueue, WriterThread
from .errors import DatabaseError, DatabaseFull, DatabaseUnavailable

T = TypeVar("T")

_MIGRATION_LOCK_KEY = 0x7412_00AD


IDLE_IN_TRANSACTION_MS = 10_000
"""PostgreSQL ends a session left idle inside a transaction this long (see ``Database``)."""


def database_url(url_or_path: str | os.PathLike[str]) -> str:
    """A SQLAlchemy URL for a URL or a file path (``sqlite+aiosqlite`` for paths)."""
    text = os.fspath(url_or_path)
    if "://" in text:
        if text.startswith("sqlite://") and not text.startswith("sqlite+aiosqlite://"):
            text = "sqlite+aiosqlite://" + text[len("sqlite://") :]
        if text.startswith(("postgresql://", "postgres://")):
            text = "postgresql+asyncpg://" + text.split("://", 1)[1]
        return text
    # a path is that file whatever it holds: ``?``, ``#`` or ``%`` are escaped, not read as
    # the URL's query or an escape (``--db 'a?b.db'`` opened a file named ``a``)
    path = str(Path(text).expanduser().resolve())
    return sa.URL.create("sqlite+aiosqlite", database=path).render_as_string(hide_password=False)


def _sqlite_path(url: sa.URL) -> Path | None:
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db)


def prepare_sqlite_file(path: Path, *, create_dirs: bool) -> None:
    """Make sure the database file exists with mode 0600 before SQLite opens it."""
    parent = path.parent
    if not parent.is_dir():
        if not create_dirs:
            raise DatabaseUnavailable(f"database directory does not exist: {parent}")
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as err:
        raise DatabaseUnavailable(f"cannot open database {path}: {err.strerror}") from err
    os.close(fd)
    _switch_to_wal(path)


def _switch_to_wal(path: Path) -> None:
    """Put the database in WAL mode once, before any engine connects, waiting for the lock.

    Two processes creating one database at once race inside ``PRAGMA journal_mode = WAL``:
    SQLite switches modes by upgrading a read transaction to a write one, which fails at once
    with SQLITE_BUSY (the busy handler is never consulted) while the other holds the write lock.
    So retry here, briefly blocking; once the file is in WAL mode the connect hooks' PRAGMA is a
    no-op."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise translate(err, where=f"opening {path}") from err
        except sqlite3.Error as err:
            raise translate(err, where=f"opening {path}") from err
        finally:
            conn.close()
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def translate(err: BaseException, *, where: str = "") -> DatabaseError:
    """The one place where SQLAlchemy/driver exceptions become store errors."""
    text = str(getattr(err, "orig", None) or err)
    low = text.lower()
    prefix = f"{where}: " if where else ""
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    if "disk is full" in low or "database or disk is full" in low or "no space left" in low:
        return DatabaseFull(f"{prefix}database or disk is full ({first})")
    if isinstance(err, OSError | exc.InterfaceError) or "connection refused" in low:
        return DatabaseUnavailable(f"{prefix}database unavailable: {first}")
    if "unable to open database" in low or "readonly database" in low:
        return DatabaseUnavailable(f"{prefix}{first}")
    if "file is not a database" in low or "malformed" in low:
        return DatabaseUnavailable(f"{prefix}not a threadloom database ({first})")
    return DatabaseError(f"{prefix}{first}")


async def finish_uncancelled(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion even if the caller is cancelled meanwhile; the cancellation is
    re-raised afterwards. Used for commits and terminal-status writes, which must never be left
    half-done or skipped because the task that asked for them was cancelled."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = cancelled or not task.cancelled()
        except BaseException:  # the task's own error, raised below
            pass
    if cancelled:
        # the caller's cancellation wins over the work's own error (a write that failed once
        # its caller was cancelled): raising the error instead lost the cancellation, and a
        # loop that retries on errors — a lease's renewer — then never stopped
        if not task.cancelled():
            task.exception()  # retrieved: it was the caller's to know only as cancelled
        raise asyncio.CancelledError
    return task.result()


class SaTx(Tx):
    """``Tx`` on a SQLAlchemy connection inside ``run_sync`` (PostgreSQL through asyncpg, or a
    SQLite database named by a ``file:`` URI): the statement's ``:name`` parameters bound by
    ``sa.text``, compiled once per statement text."""

    __slots__ = ("conn", "postgres")

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn
        self.postgres = conn.dialect.name == "postgresql"

    def _run(self, sql: str, params: Any) -> sa.CursorResult[Any]:
        text = _TEXTS.get(sql)
        if text is None:
            text = _TEXTS[sql] = sa.text(sql)
        try:
            return self.conn.execute(text, params)
        except exc.DBAPIError as err:
            if getattr(err.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE:
                raise LockTimeout(str(err.orig)) from None
            raise

    def execute(self, sql: str, params: Params = None) -> int:
        return int(self._run(sql, params or {}).rowcount)

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._run(sql, list(rows))

    def fetchone(self, sql: str, params: Params = None) -> Row | None:
        return self._run(sql, params or {}).first()

    def fetchall(self, sql: str, params: Params = None) -> list[Row]:
        return list(self._run(sql, params or {}).all())

    def time(self, when: datetime) -> Any:
        return when if self.postgres else sqlite_time(when)

    def guarded(self, sql: str, params: Params = None) -> bool:
        try:
            with self.conn.begin_nested():
                self._run(sql, params or {})
        except exc.DBAPIError:
            return False
        return True


_TEXTS: dict[str, sa.TextClause] = {}
LOCK_NOT_AVAILABLE = "55P03"


class Database:
    """One database, and the one choice of how its statements run, made here when it opens
    (as an HTTP client chooses its transport once): a SQLite file runs every statement on plain
    ``sqlite3`` (``store._sqlitefile``: the writer thread, the reader pool), anything else through
    SQLAlchemy's ``run_sync``. ``write`` runs a statement function in a write transaction,
    ``read`` in a read; both translate driver errors (``translate``)."""

    def __init__(
        self,
        url: str,
        *,
        create_dirs: bool = False,
        synchronous: str = "FULL",
        password: str | None = None,
    ) -> None:
        self.url = sa.make_url(database_url(url))
        self.dialect = self.url.get_backend_name()
        if self.dialect == "postgresql" and self.url.password is None and password:
            # the opener's PGPASSWORD: the command takes it out of the environment at start,
            # where asyncpg would read it (workers._secrets)
            self.url = self.url.set(password=password)
        if self.dialect not in ("sqlite", "postgresql"):
            raise DatabaseUnavailable(
                f"unsupported database URL {self.url.render_as_string(hide_password=True)!r}:"
                " use a file path, sqlite+aiosqlite:///… or postgresql+asyncpg://…"
            )
        self.path: Path | None = None
        self.raw: ReaderPool | None = None
        self.queue: WriteQueue | None = None
        self.appender: WriterThread | None = None
        if self.dialect == "sqlite":
            self.path = _sqlite_path(self.url)
            if self.path is None and self.url.database in (None, "", ":memory:"):
                raise DatabaseUnavailable(
                    f"an in-memory SQLite database ({self.url.render_as_string()!r}) cannot hold"
                    " threads: they must outlive the process and be seen by every connection;"
                    " use a file path (a temporary one for tests)"
                )
            if self.path is not None:
                prepare_sqlite_file(self.path, create_dirs=create_dirs)
                self.raw = ReaderPool(self.path)
                self.queue = WriteQueue(self.path)
                self.appender = _raw_writer(self.path, synchronous)
            self.writer = create_async_engine(self.url, pool_size=1, max_overflow=0)
            self.reader = create_async_engine(self.url, pool_size=4, max_overflow=4)
            self._sqlite_hooks(self.writer, begin="BEGIN IMMEDIATE", synchronous=synchronous)
            self._sqlite_hooks(self.reader, begin="BEGIN", synchronous=synchronous)
        else:
            # a host frozen or cut off mid-transaction would hold its row locks until it came
            # back (its socket stays open); the server ends such a session instead, so another
            # host can take its threads over (no transaction here spans a model call or a tool)
            settings = {"idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_MS)}
            self.writer = create_async_engine(
                self.url,
                pool_size=5,
                max_overflow=5,
                connect_args={"server_settings": settings},
            )
            self.reader = self.writer

    @staticmethod
    def _sqlite_hooks(engine: AsyncEngine, *, begin: str, synchronous: str) -> None:
        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # pysqlite's own transaction handling is switched off; ``_on_begin`` emits ours
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA foreign_keys = ON")
            cur.execute(f"PRAGMA synchronous = {synchronous}")
            cur.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            conn.exec_driver_sql(begin)

    @property
    def display(self) -> str:
        if self.path is not None:
            return str(self.path)
        return self.url.render_as_string(hide_password=True)

    async def write(self, fn: Callable[[Tx], T], *, where: str = "") -> T:
        """``fn(tx)`` in one write transaction: on a SQLite file, on the writer thread in this
        process's turn of the writer queue (``BEGIN IMMEDIATE``); else through SQLAlchemy."""
        try:
            if self.appender is not None:
                fd = self.queue.file() if self.queue is not None else None
                try:
                    return await self.appender.run(
                        fn, queue_fd=fd, queue_timeout_s=BUSY_TIMEOUT_MS / 1000
                    )
                except QueueTimeout as err:
                    assert self.queue is not None
                    raise DatabaseError(self.queue.held_too_long(where, err.args[0])) from None
            async with self.writer.begin() as conn:
                return await conn.run_sync(lambda c: fn(SaTx(c)))
        except (exc.SQLAlchemyError, sqlite3.Error, OSError) as err:
            raise translate(err, where=where) from err

    async def read(
        self,
        fn: Callable[[Tx], T],
        *,
        where: str = "",
        inline: bool | Callable[[Tx], T] = False,
    ) -> T:
        """``fn(tx)`` in a read: on a SQLite file on the reader pool — or, ``inline``, at once
        on the event loop's thread unless SQLite is busy or it raises ``Later`` (small reads:
        the hop costs more than they do; ``inline`` may be a function of its own for that, one
        that gives way to the pool when the read turns out large); else in a SQLAlchemy read
        transaction."""
        try:
            if self.raw is not None:
                first = fn if inline is True else inline or None
                done = self.raw.inline(first) if first is not None else None
                return done[0] if done is not None else await self.raw.run(fn)
            async with self.reader.connect() as conn, conn.begin():
                return await conn.run_sync(lambda c: fn(SaTx(c)))
        except (exc.SQLAlchemyError, sqlite3.Error, OSError) as err:
            raise translate(err, where=where) from err

    def write_turn(self, where: str = "") -> contextlib.AbstractAsyncContextManager[None]:
        """This process's turn in the writer queue of a SQLite file (``WriteQueue``), for the
        one write that does not run on the writer thread: a migration (Alembic needs
        SQLAlchemy's connection). A no-op elsewhere."""
        if self.queue is None:
            return contextlib.nullcontext()
        return flocked(self.queue.path)

    async def migrate(self) -> str | None:
        """Upgrade the schema to head. Returns the revision found before, or None when the
        database was already at head. Safe when several processes open a fresh database at once:
        SQLite serialises on ``BEGIN IMMEDIATE``, PostgreSQL on an advisory lock, and the version
        is read again under that lock."""
        where = f"migrating {self.display}"
        if await self.read(revision, where=where, inline=True) == SCHEMA_HEAD:
            return None
        try:
            async with self.write_turn(where), self.writer.begin() as conn:
                if self.dialect == "postgresql":
                    await conn.execute(
                        sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY}
                    )
                before: str | None = await conn.run_sync(_upgrade_to_head)
            return before
        except (exc.SQLAlchemyError, OSError) as err:
            raise translate(err, where=where) from err

    async def dispose(self) -> None:
        if self.raw is not None:
            self.raw.close()
        if self.appender is not None:
            self.appender.close()
        await self.writer.dispose()
        if self.queue is not None:
            self.queue.close()
        if self.reader is not self.writer:
            await self.reader.dispose()


@contextlib.asynccontextmanager
async def flocked(path: Path) -> AsyncIterator[None]:
    """An exclusive ``flock`` on ``path`` (created 0600) for the block, waited for in a thread:
    the kernel wakes the waiter on release, and the lock goes with the process if it dies."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise translate(err, where=f"locking {path}") from err
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # shielded: a waiter cancelled meanwhile still ends its thread's flock, and closing
            # ``fd`` below then drops whatever that thread got
            await asyncio.shield(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
        yield
    finally:
        os.close(fd)  # releases the lock


def _raw_writer(path: Path, synchronous: str) -> WriterThread:
    try:
        return WriterThread(path, busy_timeout_ms=BUSY_TIMEOUT_MS, synchronous=synchronous)
    except sqlite3.Error as err:
        raise translate(err, where=f"opening {path}") from err


def alembic_config() -> Any:
    from alembic.config import Config

    import migrations

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return cfg


def _upgrade_to_head(sync_conn: sa.Connection) -> str | None:
    from alembic import command
    from alembic.migration import MigrationContext

    before = MigrationContext.configure(sync_conn).get_current_revision()
    if before == SCHEMA_HEAD:
        return None
    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, "head")
    return before or "base"
