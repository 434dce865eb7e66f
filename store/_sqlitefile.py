"""The threads that own a SQLite file's ``sqlite3`` connections: the writer's (``WriterThread``),
the readers' pool (``ReaderPool``) and the writer queue between processes (``WriteQueue``).
They run the store's statements through ``store._sqlite.SqliteTx``.

Why not SQLAlchemy here: an append is the hot path (a worker turn stores two) and the async
machinery cost more than SQLite itself — a thread hop per statement, Core's compilation and
bookkeeping around each. Here a write hops once per transaction to the writer's own thread
(``WriterThread``), which runs ``BEGIN IMMEDIATE``, the statements and ``COMMIT`` on a connection
with the store's PRAGMAs (WAL, ``synchronous``, ``busy_timeout``, foreign keys), so a caller's
await returns when its rows are on disk. Reads run on a small pool of ``query_only``
connections (``ReaderPool``), or at once on the event loop's thread when they are small.

Checkpoints: SQLite's own, automatic one (every 1000 WAL pages, by the connection whose commit
crosses that), which runs inside that ``COMMIT`` and so inside the writer queue. That is where
it must run: a checkpoint can only let the next writer start the WAL over when no other writer
has appended since it began. Run beside the writers instead (a PASSIVE checkpoint on a thread of
its own, as this module once did), it was never complete when the next write came, the WAL grew
for as long as several processes kept writing (51 MB against 4 MB for 4 processes × 300
appends), and every commit paid for the longer file (``tests/benchmarks/bench_multiproc.py``).

``store._engine.Database`` owns these objects and translates their errors. Apart from
``store._sqlite`` so that the CLI's read-only fast path, which needs ``SqliteTx`` alone, does not
import asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ._sqlite import BUSY_TIMEOUT_MS, Later, SqliteTx, Tx

T = TypeVar("T")


def connect(path: Path, *, busy_timeout_ms: int, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


def _reader_conn(path: Path, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    conn.execute("PRAGMA query_only = ON")
    return conn


class ReaderPool:
    """Reads on ``sqlite3`` connections, one per thread of a small pool: one thread hop per read
    instead of SQLAlchemy's async machinery, and no hop at all for small reads (``inline``).
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

    def _call(self, fn: Callable[[Tx], T]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _reader_conn(self.path, BUSY_TIMEOUT_MS)
            with self._lock:
                self._conns.append(conn)
        return fn(SqliteTx(conn))

    def inline(self, fn: Callable[[Tx], T]) -> tuple[T] | None:
        """``(fn(tx),)`` run at once on the calling thread (the event loop's), on a connection
        of its own that never waits for a lock: None when SQLite answers busy or ``fn`` raises
        ``Later``, and the caller goes to the pool (``run``) instead. For small reads only — an
        indexed read of a few rows takes less than the hop to the pool and back
        (``tests/benchmarks/bench_store.py``, ``read``); a WAL reader is busy only while
        another connection recovers the WAL."""
        if self._inline is None:
            self._inline = _reader_conn(self.path, 0)
        try:
            return (fn(SqliteTx(self._inline)),)
        except Later:
            return None
        except sqlite3.OperationalError as err:
            if err.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return None
            raise

    async def run(self, fn: Callable[[Tx], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._call, fn)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        if self._inline is not None:
            self._inline.close()
            self._inline = None


class QueueTimeout(Exception):
    """The writer queue stayed held by others for the whole timeout (seconds in ``args``)."""


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

    def held_too_long(self, where: str, timeout: float | None = None) -> str:
        prefix = f"{where}: " if where else ""
        what = f"{prefix}database is locked: another writer has held {self.path}"
        return what if timeout is None else f"{what} for {timeout:g} s"

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _Job:
    __slots__ = ("abandoned", "fd", "guard", "started")

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self.guard = threading.Lock()
        self.started = False
        self.abandoned = False


class WriterThread:
    """Write transactions on one ``sqlite3`` connection, run one at a time on one thread.

    The connection (``conn``) and the thread are made on first use, so a process that only
    reads pays for neither; the connection is used only on the writer thread afterwards (a
    test may install a trace callback on it). The caller serialises ``run`` (the store's
    ``Writer`` lock and the process queue); the thread serialises it anyway."""

    def __init__(self, path: Path, *, busy_timeout_ms: int, synchronous: str) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stuck: _Job | None = None
        self._closed = False

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = connect(
                self.path, busy_timeout_ms=self._busy_timeout_ms, synchronous=self._synchronous
            )
        return self._conn

    async def run(
        self,
        fn: Callable[[Tx], T],
        *,
        queue_fd: int | None = None,
        queue_timeout_s: float = 30.0,
    ) -> T:
        """``fn(tx)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on the writer thread, rolled
        back if it raises; ``sqlite3`` errors are raised as they are.

        ``queue_fd``: the process's writer-queue file (``WriteQueue``), locked exclusively by
        the writer thread itself around the transaction: a waiter sleeps in the kernel and is
        woken straight into its transaction, and the queue is free again the moment the commit
        is, without a hop through the event loop on either side. A wait longer than
        ``queue_timeout_s`` raises ``QueueTimeout`` (the transaction is then never run); once
        it has begun it is waited for whatever the time."""
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        if self._thread is None:
            self.conn  # noqa: B018 (opened here, on the caller's thread: its errors raise here)
            # a daemon thread, not an executor's: a wait for a queue held by a stuck process
            # must not keep this process from exiting
            self._thread = threading.Thread(target=self._serve, name="tl-write", daemon=True)
            self._thread.start()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        job = _Job(os.dup(queue_fd) if queue_fd is not None else None)
        self._jobs.put((job, fn, loop, fut))
        timer = loop.call_later(queue_timeout_s, self._give_up, job, fut, queue_timeout_s)
        try:
            result = await fut
        except asyncio.CancelledError:
            with job.guard:  # not begun: it never will be
                if not job.started:
                    job.abandoned = True
                    self._stuck = job
            raise
        finally:
            timer.cancel()
        return result

    def _give_up(self, job: _Job, fut: asyncio.Future[Any], timeout: float) -> None:
        with job.guard:
            if job.started or fut.done():
                return  # begun: waited for whatever the time
            job.abandoned = True
            self._stuck = job
        fut.set_exception(QueueTimeout(timeout))

    def _serve(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, fn, loop, fut = item
            try:
                result = self._run_job(job, fn)
            except BaseException as err:
                _settle(loop, fut, None, err)
            else:
                _settle(loop, fut, result, None)

    def _run_job(self, job: _Job, fn: Callable[[Tx], Any]) -> Any:
        fd, locked = job.fd, False
        try:
            if fd is not None:
                try:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:  # others ahead: sleep in the kernel until it is ours
                        fcntl.flock(fd, fcntl.LOCK_EX)
                    locked = True
                except OSError:  # no locks on this file system: SQLite's lock alone
                    pass
            with job.guard:
                if job.abandoned:
                    return None
                job.started = True
            return self._transaction(fn)
        finally:
            if fd is not None:
                if locked:  # the queue's own descriptor shares this lock: unlock explicitly
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            if job.abandoned:
                self._stuck = None

    def _transaction(self, fn: Callable[[Tx], T]) -> T:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(SqliteTx(conn))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
        return result

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._jobs.put(None)
            if self._stuck is not None:
                # the thread still waits for a queue held elsewhere, for a transaction it will
                # never run; it ends when it gets the queue (or with the process), and so does
                # the connection
                return
            self._thread.join()
        if self._conn is not None:
            self._conn.close()


def _settle(
    loop: asyncio.AbstractEventLoop,
    fut: asyncio.Future[Any],
    result: Any,
    err: BaseException | None,
) -> None:
    def settle() -> None:
        if fut.done():
            return
        if err is not None:
            fut.set_exception(err)
        else:
            fut.set_result(result)

    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
        loop.call_soon_threadsafe(settle)
