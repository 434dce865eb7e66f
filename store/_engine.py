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
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, overload

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ._rawwrite import QueueTimeout, RawWriter
from ._schema import SCHEMA_HEAD as SCHEMA_HEAD  # defined where store._rawread reads it
from ._secrets import env_var
from .errors import DatabaseError, DatabaseFull, DatabaseUnavailable

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
_MIGRATION_LOCK_KEY = 0x7412_00AD


IDLE_IN_TRANSACTION_MS = 10_000
"""PostgreSQL ends a session left idle inside a transaction this long (see ``Database``)."""


def utcnow() -> datetime:
    return datetime.now(UTC)


@overload
def as_utc(value: datetime) -> datetime: ...
@overload
def as_utc(value: None) -> None: ...
def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything we store is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


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


class RawSqliteReader:
    """Reads on SQLite through plain ``sqlite3`` connections, one per thread of a small pool:
    one thread hop per read instead of SQLAlchemy's async machinery (about 1 ms a read here),
    and no hop at all for small reads (``inline``).
    The connections are ``query_only``, so this path can never write. Reads need no explicit
    transaction: messages are append-only and numbered, so reading the head first and then
    messages up to it is consistent whatever commits in between."""

    def __init__(self, path: Path, *, workers: int = 2) -> None:
        self.path = path
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tl-read")
        self._inline: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return fn(self._conn())

    def inline(self, fn: Callable[[sqlite3.Connection], T], *, where: str = "") -> T | None:
        """``fn`` run at once on the calling thread (the event loop's), on a connection of its
        own that never waits for a lock: None when SQLite answers busy, and the caller goes to
        the pool (``run``) instead. For small reads only — an indexed read of a few rows takes
        less than the hop to the pool and back (``tests/benchmarks/bench_store.py``, ``read``);
        a WAL reader is busy only while another connection recovers the WAL."""
        conn = self._inline
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA query_only = ON")
            self._inline = conn
        try:
            return fn(conn)
        except sqlite3.OperationalError as err:
            if err.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return None
            raise translate(err, where=where) from err
        except sqlite3.Error as err:
            raise translate(err, where=where) from err

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, where: str = "") -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, self._call, fn)
        except sqlite3.Error as err:
            raise translate(err, where=where) from err

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        if self._inline is not None:
            self._inline.close()
            self._inline = None


class WriteQueue:
    """A queue in front of SQLite's one write lock, shared by every writer of the file.

    SQLite's busy handler does not queue waiters: a process that finds the write lock taken
    sleeps and retries, its sleeps growing to 100 ms each, while the holder — committing every
    few ms — releases and retakes the lock in between. Under steady writes from several
    processes a waiter can lose every race for seconds (``tests/benchmarks/bench_multiproc.py``:
    appends stalled 1-2 s while the median was 2 ms). An exclusive ``flock`` on a sidecar file
    (``<db>-writer``), taken before ``BEGIN IMMEDIATE`` and dropped after the commit, makes the
    waiters sleep in the kernel, which wakes them when it is released: the wait of one write is
    bounded by the writes ahead of it. The file lock is only a queue: SQLite's own lock stays
    the mutual exclusion, so a writer that does not queue (the ``sqlite3`` shell) is excluded
    as before, through the busy timeout. Where the sidecar cannot be opened or locked (a
    directory the store may not write to) writes go straight to SQLite's lock."""

    def __init__(self, path: Path) -> None:
        self.path = path.with_name(path.name + "-writer")
        self._fd: int | None = None
        self._unusable = False

    def file(self) -> int | None:
        """The queue's file (its lock is the queue), None when it cannot be used."""
        if self._fd is None and not self._unusable:
            try:
                self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            except OSError:
                self._unusable = True
        return self._fd

    @contextlib.asynccontextmanager
    async def turn(self, *, where: str = "") -> AsyncIterator[None]:
        """Hold the head of the queue for one write transaction."""
        fd = self.file()
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                await _wait_for_flock(fd, BUSY_TIMEOUT_MS / 1000, what=self.held_too_long(where))
            except OSError:  # no locks on this file system: SQLite's lock alone
                self._unusable, fd = True, None
        try:
            yield
        finally:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def held_too_long(self, where: str, timeout: float | None = None) -> str:
        prefix = f"{where}: " if where else ""
        what = f"{prefix}database is locked: another writer has held {self.path}"
        return what if timeout is None else f"{what} for {timeout:g} s"

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


async def _wait_for_flock(fd: int, timeout: float, *, what: str) -> None:
    """Wait for the lock in a daemon thread (blocked in the kernel, woken on release), at most
    ``timeout`` s. A wait given up (timeout, cancellation) unlocks as soon as the thread gets the
    lock; the thread works on a duplicate of ``fd``, so closing the store meanwhile is safe."""
    loop = asyncio.get_running_loop()
    got: asyncio.Future[None] = loop.create_future()
    guard = threading.Lock()
    state = {"acquired": False, "abandoned": False}
    own = os.dup(fd)  # the same open file description: its lock is ``fd``'s

    def block() -> None:
        try:
            fcntl.flock(own, fcntl.LOCK_EX)
            with guard:
                if state["abandoned"]:
                    fcntl.flock(own, fcntl.LOCK_UN)
                else:
                    state["acquired"] = True
                    loop.call_soon_threadsafe(_settle, got)
        finally:
            os.close(own)

    threading.Thread(target=block, name="tl-write-queue", daemon=True).start()
    try:
        await asyncio.wait_for(asyncio.shield(got), timeout)
    except BaseException as err:
        with guard:
            if state["acquired"]:
                if isinstance(err, TimeoutError):
                    return  # it came just as the clock ran out: take it
                fcntl.flock(fd, fcntl.LOCK_UN)
            state["abandoned"] = True
        if isinstance(err, TimeoutError):
            raise DatabaseError(f"{what} for {timeout:g} s") from None
        raise


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Database:
    """Engines for one database. ``write`` runs a function in a write transaction, ``read`` in a
    read transaction; both translate driver errors."""

    def __init__(self, url: str, *, create_dirs: bool = False, synchronous: str = "FULL") -> None:
        self.url = sa.make_url(database_url(url))
        self.dialect = self.url.get_backend_name()
        if self.dialect == "postgresql" and self.url.password is None:
            # asyncpg would read PGPASSWORD from the environment, but the command took it out
            # at start (store._secrets): hand it over from there
            password = env_var("PGPASSWORD")
            if password:
                self.url = self.url.set(password=password)
        if self.dialect not in ("sqlite", "postgresql"):
            raise DatabaseUnavailable(
                f"unsupported database URL {self.url.render_as_string(hide_password=True)!r}:"
                " use a file path, sqlite+aiosqlite:///… or postgresql+asyncpg://…"
            )
        self.path: Path | None = None
        self.raw: RawSqliteReader | None = None
        self.queue: WriteQueue | None = None
        self.appender: RawWriter | None = None
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
                self.raw = RawSqliteReader(self.path)
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

    async def write(self, fn: Callable[[AsyncConnection], Awaitable[T]], *, where: str = "") -> T:
        try:
            async with self.write_turn(where), self.writer.begin() as conn:
                if self.dialect == "postgresql":
                    # one writer per process is enforced in Store; across processes row locks
                    # (SELECT … FOR UPDATE) serialise writers of the same thread
                    pass
                result = await fn(conn)
        except (exc.SQLAlchemyError, OSError) as err:
            raise translate(err, where=where) from err
        return result

    async def write_sqlite(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        where: str = "",
    ) -> T:
        """``write`` on the raw ``sqlite3`` writer of a SQLite file (``appender``, see
        ``store._rawwrite``): ``fn`` gets a ``sqlite3`` connection in ``BEGIN IMMEDIATE``, in
        this process's turn of the writer queue like every other write."""
        if self.appender is None:
            raise DatabaseError(f"{where}: no raw sqlite3 writer on {self.display}")
        fd = self.queue.file() if self.queue is not None else None
        timeout = BUSY_TIMEOUT_MS / 1000
        try:
            return await self.appender.run(fn, queue_fd=fd, queue_timeout_s=timeout)
        except QueueTimeout:
            assert self.queue is not None
            raise DatabaseError(self.queue.held_too_long(where, timeout)) from None
        except (sqlite3.Error, OSError) as err:
            raise translate(err, where=where) from err

    def write_turn(self, where: str) -> contextlib.AbstractAsyncContextManager[None]:
        """This writer's turn in the queue of a SQLite file (``WriteQueue``); a no-op elsewhere.
        Every SQLite write transaction of the process runs inside one, whichever connection it
        uses (``write`` and ``migrate`` take it themselves): a writer that skips the queue
        barges past the processes waiting in it."""
        if self.queue is None:
            return contextlib.nullcontext()
        return self.queue.turn(where=where)

    async def read(self, fn: Callable[[AsyncConnection], Awaitable[T]], *, where: str = "") -> T:
        try:
            async with self.reader.connect() as conn, conn.begin():
                return await fn(conn)
        except (exc.SQLAlchemyError, OSError) as err:
            raise translate(err, where=where) from err

    async def migrate(self) -> str | None:
        """Upgrade the schema to head. Returns the revision found before, or None when the
        database was already at head. Safe when several processes open a fresh database at once:
        SQLite serialises on ``BEGIN IMMEDIATE``, PostgreSQL on an advisory lock, and the version
        is read again under that lock."""
        try:
            if await self._current_revision() == SCHEMA_HEAD:
                return None
            async with self.write_turn("migrating"), self.writer.begin() as conn:
                if self.dialect == "postgresql":
                    await conn.execute(
                        sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY}
                    )
                before: str | None = await conn.run_sync(_upgrade_to_head)
            return before
        except (exc.SQLAlchemyError, OSError) as err:
            raise translate(err, where=f"migrating {self.display}") from err

    async def _current_revision(self) -> str | None:
        if self.raw is not None:
            # a SQLite file: a plain sqlite3 read (opening a store then connects no engine;
            # a job that writes and reads through sqlite3 never does)
            found = self.raw.inline(_sqlite_revision, where=f"migrating {self.display}")
            if found is not None:
                return found[0]
        async with self.reader.connect() as conn, conn.begin():
            has = await conn.run_sync(lambda c: sa.inspect(c).has_table("alembic_version"))
            if not has:
                return None
            row = (await conn.execute(sa.text("SELECT version_num FROM alembic_version"))).first()
            return None if row is None else str(row[0])

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


def _sqlite_revision(conn: sqlite3.Connection) -> tuple[str | None]:
    """The schema's revision (None: not migrated yet), in a tuple (``inline`` answers None
    when the database is busy)."""
    try:
        # every row read: no statement left open holding a read snapshot on this connection
        rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.OperationalError as err:
        if "no such table" not in str(err):
            raise
        return (None,)
    return (str(rows[0][0]) if rows else None,)


def _raw_writer(path: Path, synchronous: str) -> RawWriter:
    try:
        return RawWriter(path, busy_timeout_ms=BUSY_TIMEOUT_MS, synchronous=synchronous)
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
