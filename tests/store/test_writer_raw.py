"""SQLite writes on the ``sqlite3`` writer thread (``store._sqlite``): every write of a file
runs there, in ``BEGIN IMMEDIATE``, writing the text SQLAlchemy wrote (older rows compare
alike); its checkpoints keep the WAL bounded, and a queue held elsewhere neither runs a
given-up append later nor keeps the store from closing."""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from store import (
    DatabaseError,
    NewMessage,
    Store,
    ToolResultBlock,
    ToolUseBlock,
    _engine,
)
from store.models import Usage, UsageRecord

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@contextmanager
def _held(path: Path) -> Iterator[None]:
    """The writer queue held as another process would: its own open file description."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_writes_take_the_sqlite3_writer_and_store_sqlalchemys_text(
    store: Store, db_url: str
) -> None:
    assert store.db.appender is not None
    statements: list[str] = []
    store.db.appender.conn.set_trace_callback(statements.append)
    tid = (await store.create_thread(kind="worker", messages=[NewMessage.user("go")])).id
    call = NewMessage(role="assistant", content=[ToolUseBlock(id="t1", name="grep", input={})])
    usage = UsageRecord(model="m", usage=Usage(input_tokens=3, output_tokens=4), cost_usd=0.25)
    [stored] = await store.append(tid, call, usage=usage)
    assert "BEGIN IMMEDIATE" in statements and "COMMIT" in statements

    path = Path(db_url)
    # both as SQLAlchemy's DateTime wrote SQLite timestamps: naive UTC with microseconds
    (first, second) = _rows(path, "SELECT created_at, format FROM messages ORDER BY seq")
    assert len(str(first[0])) == len(str(second[0])) == len("2026-01-01 00:00:00.000000")
    assert first[1] == second[1]
    assert datetime.fromisoformat(str(second[0])).replace(tzinfo=UTC) == stored.created_at
    [(head, pending, version)] = _rows(
        path, "SELECT head_seq, pending_tool_ids, version FROM threads"
    )
    assert (head, pending) == (2, '["t1"]')
    info = await store.get_thread(tid)
    assert info.head_seq == 2 and info.version == version
    assert [(u.thread_id, u.responses) for u in await store.usage.totals(thread_id=tid)] == [
        (tid, 1)
    ]
    # the thread reads back as written: the pending id is answered next
    answer = NewMessage(role="user", content=[ToolResultBlock(tool_use_id="t1", content="ok")])
    assert [m.seq for m in await store.append(tid, answer)] == [3]
    assert [h.seq for h in await store.search("grep")] == [2]


async def test_writers_taking_turns_keep_the_wal_bounded_and_checkpoint_into_the_file(
    db_url: str, tmp_path: Path
) -> None:
    """Two stores on one file (two processes' writers, each its own connection) appending in
    turn: SQLite's automatic checkpoint runs in the commit that crosses 1000 WAL pages, inside
    the writer queue, so it is complete before the next writer starts and that writer starts
    the WAL over. (Checkpoints run beside the writers were never complete when the next write
    came: the WAL grew with every append.)"""
    stores = [await Store.open(db_url), await Store.open(db_url)]
    try:
        page = stores[0].db.appender.conn.execute("PRAGMA page_size").fetchone()[0]
        tids = [(await s.create_thread(kind="worker")).id for s in stores]
        wal = Path(db_url + "-wal")
        sizes = []
        for i in range(600):
            await asyncio.gather(
                *(
                    s.append(t, NewMessage.user(f"message {i} " + "x" * 200))
                    for s, t in zip(stores, tids, strict=True)
                )
            )
            sizes.append(wal.stat().st_size)
        assert sizes[-1] > 0
        written = 2 * 600 * 3  # pages: at least the message, its index entry and the thread row
        assert written > 3 * 1000  # the WAL had to start over several times
        assert max(sizes) < 1500 * page, f"the WAL grew to {max(sizes) // page} pages"
    finally:
        for s in stores:
            await s.close()
    # the database file alone (no WAL beside it) holds what was checkpointed into it
    alone = tmp_path / "alone.db"
    shutil.copyfile(db_url, alone)
    [(count,)] = _rows(alone, "SELECT count(*) FROM messages")
    assert isinstance(count, int) and count > 0


async def test_an_append_given_up_waiting_for_the_queue_never_runs_and_close_does_not_wait(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await Store.open(db_url)
    tid = (await store.create_thread(kind="worker")).id
    queue = Path(db_url).with_name(Path(db_url).name + "-writer")
    monkeypatch.setattr(_engine, "BUSY_TIMEOUT_MS", 50)
    with _held(queue):
        with pytest.raises(DatabaseError, match=r"another writer has held .*-writer for 0\.05 s"):
            await store.append(tid, NewMessage.user("never"))
        await store.close()  # its writer thread still waits for the queue: not for it
    monkeypatch.undo()
    other = await Store.open(db_url)
    try:
        await other.append(tid, NewMessage.user("after"))
        assert [m.text for m in await other.messages(tid)] == ["after"]
    finally:
        await other.close()


async def test_a_cancelled_append_waiting_for_the_queue_is_not_written_later(
    store: Store, db_url: str
) -> None:
    tid = (await store.create_thread(kind="worker")).id
    queue = Path(db_url).with_name(Path(db_url).name + "-writer")
    appender, writer_queue = store.db.appender, store.db.queue
    assert appender is not None and writer_queue is not None
    with _held(queue):
        task = asyncio.create_task(
            appender.run(
                lambda tx: tx.execute("UPDATE threads SET title = 'late'"),
                queue_fd=writer_queue.file(),
            )
        )
        for _ in range(20):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await store.append(tid, NewMessage.user("next"))  # after the abandoned job on the thread
    assert (await store.get_thread(tid)).title == ""
