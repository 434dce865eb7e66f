"""SQLite specifics (SPEC §Storage, DESIGN "SQLite, correctly")."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import DatabaseError, DatabaseUnavailable, Store
from store._sqlite import Tx

from .helpers import assistant, user


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """Files would be world-readable by default: the store must not rely on the umask."""
    old = os.umask(0o000)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("permissive_umask")
async def test_a_new_database_file_and_its_wal_files_have_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    store = await Store.open(str(path))
    try:
        await store.create_thread(kind="lead", messages=[user("x")])
        assert _mode(path) == 0o600
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            assert side.exists() and _mode(side) == 0o600, suffix
    finally:
        await store.close()
    store = await Store.open(str(path))  # reopening keeps it private
    await store.close()
    assert _mode(path) == 0o600


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_the_copied_test_database_is_also_0600(store: Store) -> None:
    assert store.db.path is not None and _mode(store.db.path) == 0o600


async def _pragma(store: Store, name: str, *, write: bool) -> Any:
    def fn(tx: Tx) -> Any:
        row = tx.fetchone(f"PRAGMA {name}")
        return None if row is None else row[0]

    return await (store.db.write(fn) if write else store.db.read(fn))


async def test_the_writer_uses_wal_foreign_keys_full_sync_and_a_busy_timeout(
    tmp_path: Path,
) -> None:
    store = await Store.open(str(tmp_path / "t.db"))
    try:
        assert await _pragma(store, "journal_mode", write=True) == "wal"
        assert await _pragma(store, "foreign_keys", write=True) == 1
        assert await _pragma(store, "synchronous", write=True) == 2  # FULL
        assert await _pragma(store, "busy_timeout", write=True) >= 5000
    finally:
        await store.close()


async def test_readers_wait_for_a_busy_database_and_can_never_write(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "t.db"))
    try:
        assert await _pragma(store, "journal_mode", write=False) == "wal"
        assert await _pragma(store, "busy_timeout", write=False) >= 5000
        assert await _pragma(store, "query_only", write=False) == 1
    finally:
        await store.close()


async def test_foreign_keys_are_enforced_and_driver_errors_are_translated(
    tmp_path: Path,
) -> None:
    store = await Store.open(str(tmp_path / "t.db"))

    def orphan(tx: Tx) -> None:
        tx.execute(
            "INSERT INTO messages (thread_id, seq, role, content, format, created_at)"
            " VALUES ('nope', 1, 'user', '[]', 1, '2026-01-01')"
        )

    try:
        with pytest.raises(DatabaseError, match="FOREIGN KEY") as err:
            await store.db.write(orphan)
        assert not isinstance(err.value, sqlite3.Error)
        assert isinstance(err.value.__cause__, sqlite3.IntegrityError)
    finally:
        await store.close()


async def test_a_missing_database_directory_is_unavailable_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(DatabaseUnavailable) as err:
        await Store.open(str(missing / "threads.db"))
    text = str(err.value)
    assert "\n" not in text and str(missing) in text and "does not exist" in text
    assert not missing.exists()


async def test_create_dirs_makes_the_missing_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "threads.db"
    store = await Store.open(str(path), create_dirs=True)
    try:
        t = await store.create_thread(kind="lead", messages=[user("x")])
        assert (await store.get_thread(t.id)).head_seq == 1
    finally:
        await store.close()
    assert _mode(path) == 0o600


async def test_a_file_that_is_not_a_database_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a sqlite database, just some text padding it out" * 100)
    with pytest.raises(DatabaseUnavailable, match="not a threadloom database"):
        await Store.open(str(path))


# ----------------------------------------------------------------- BEGIN IMMEDIATE


BUSY_TIMEOUT_S = 20


def _raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
    return conn


def _insert_thread_sql(tid: str) -> str:
    return (
        "INSERT INTO threads (id, kind, title, status, job_id, tools, version, head_seq,"
        f" pending_tool_ids, created_at, updated_at) VALUES ('{tid}', 'lead', '', 'idle', '{tid}',"
        " '[]', 1, 0, '[]', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
    )


@pytest.mark.parametrize("write", ["append", "edit"])
async def test_a_deferred_read_then_write_fails_at_once_but_the_store_waits_for_the_lock(
    tmp_path: Path, write: str
) -> None:
    """``append`` and ``edit`` (a metadata edit): every write of a SQLite file runs on the one
    sqlite3 writer (``store._sqlite``)."""
    path = tmp_path / "t.db"
    store = await Store.open(str(path))
    t = await store.create_thread(kind="lead", messages=[user("x")])

    # 1. the failure mode: a deferred transaction reads, then another connection takes the write
    #    lock; the deferred one's write fails immediately, busy timeout notwithstanding
    a, b = _raw(path), _raw(path)
    a.execute("BEGIN")
    a.execute("SELECT head_seq FROM threads").fetchall()
    b.execute("BEGIN IMMEDIATE")
    b.execute(_insert_thread_sql("b" * 26))
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        a.execute(_insert_thread_sql("a" * 26))
    # at once: the busy handler is not even consulted (it would have waited the full 20 s)
    assert time.monotonic() - started < BUSY_TIMEOUT_S / 2
    a.execute("ROLLBACK")
    a.close()

    # 2. the same scenario through the store: its write transaction starts with BEGIN IMMEDIATE,
    #    so it waits for B's lock (busy timeout) and then succeeds. Writes run on the sqlite3
    #    writer (store._sqlite), whose connection reports each statement it starts
    loop = asyncio.get_running_loop()
    begun = asyncio.Event()

    def _seen(statement: str) -> None:
        if statement == "BEGIN IMMEDIATE":
            loop.call_soon_threadsafe(begun.set)

    assert store.db.appender is not None
    store.db.appender.conn.set_trace_callback(_seen)
    if write == "append":
        task: asyncio.Task[Any] = asyncio.create_task(store.append(t.id, assistant("after B")))
    else:
        task = asyncio.create_task(store.update_thread(t.id, title="after B"))
    await begun.wait()
    done, _ = await asyncio.wait({task}, timeout=0.3)  # B still holds the lock: it waits
    assert not done
    b.execute("COMMIT")
    b.close()
    await task
    info = await store.get_thread(t.id)
    if write == "append":
        assert info.head_seq == 2
    else:
        assert info.title == "after B"
    assert (await store.resolve("T-" + "b" * 26)).thread.id == "b" * 26
    await store.close()


async def test_opening_a_new_database_waits_for_another_process_creating_it(
    tmp_path: Path,
) -> None:
    """Two processes creating the same database at once: while one holds the write lock on the
    still-empty file, the other's switch to WAL (a read transaction upgraded to a write one
    inside SQLite, which never consults the busy handler) would fail at once with "database is
    locked". Opening must wait for the lock instead."""
    path = tmp_path / "new.db"
    path.touch(mode=0o600)
    other = _raw(path)
    other.execute("BEGIN IMMEDIATE")  # the other creator, mid-way, on a file not yet in WAL
    holder = threading.Timer(0.3, other.execute, args=("COMMIT",))
    holder.start()
    try:
        store = await Store.open(str(path))
    finally:
        holder.join()
        other.close()
    try:
        assert await _pragma(store, "journal_mode", write=False) == "wal"
        t = await store.create_thread(kind="lead", messages=[user("x")])
        assert (await store.get_thread(t.id)).head_seq == 1
    finally:
        await store.close()
