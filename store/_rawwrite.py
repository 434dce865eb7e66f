"""The appends of a SQLite file on one plain ``sqlite3`` connection owned by one thread.

An append is the hot path (a worker turn stores two: the assistant message, then its tool
results) and SQLAlchemy's async machinery costs more than SQLite itself there: a thread hop per
statement and Core's compilation and bookkeeping around each. ``RawWriter.run`` hops once per
transaction to its own thread, which runs ``BEGIN IMMEDIATE``, the function (``executemany``
per table) and ``COMMIT`` on a connection with the store's PRAGMAs (WAL, ``synchronous``,
``busy_timeout``, foreign keys), so a caller's await returns when its rows are on disk. A busy
database waits there exactly as on the ORM path: ``BEGIN IMMEDIATE`` under the busy timeout.

Checkpoints: SQLite's own, automatic one (every 1000 WAL pages, by the connection whose commit
crosses that), which runs inside that ``COMMIT`` and so inside the writer queue. That is where
it must run: a checkpoint can only let the next writer start the WAL over when no other writer
has appended since it began. Run beside the writers instead (a PASSIVE checkpoint on a thread of
its own, as this module once did), it was never complete when the next write came, the WAL
grew for as long as several processes kept writing (51 MB against 4 MB for 4 processes × 300
appends), and every commit paid for the longer file (``tests/benchmarks/bench_multiproc.py``:
1,450-1,600 appends/s against 1,800-2,000, p50 2.5 against 2.0 ms).

This module imports nothing of the store; ``store._engine.Database`` owns the writer and
translates its errors.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def connect(path: Path, *, busy_timeout_ms: int, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


class QueueTimeout(Exception):
    """The writer queue stayed held by others for the whole timeout (seconds in ``args``)."""


@dataclass(slots=True)
class _Job:
    fd: int | None
    guard: threading.Lock = field(default_factory=threading.Lock)
    started: bool = False
    abandoned: bool = False


class RawWriter:
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
        fn: Callable[[sqlite3.Connection], T],
        *,
        queue_fd: int | None = None,
        queue_timeout_s: float = 30.0,
    ) -> T:
        """``fn(conn)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on the writer thread, rolled
        back if it raises; ``sqlite3`` errors are raised as they are.

        ``queue_fd``: the process's writer-queue file (``store._engine.WriteQueue``), locked
        exclusively by the writer thread itself around the transaction: a waiter sleeps in the
        kernel and is woken straight into its transaction, and the queue is free again the
        moment the commit is, without a hop through the event loop on either side. A wait longer
        than ``queue_timeout_s`` raises ``QueueTimeout`` (the transaction is then never run);
        once it has begun it is waited for whatever the time."""
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

    def _run_job(self, job: _Job, fn: Callable[[sqlite3.Connection], Any]) -> Any:
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

    def _transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
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
