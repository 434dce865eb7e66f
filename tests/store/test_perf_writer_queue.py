"""Writers of one SQLite file queue for its write lock on a sidecar file lock (issue 11: SQLite's
busy handler let a process wait seconds for the lock under steady writes from others; see
``tests/benchmarks/bench_multiproc.py``): a write waits while another holds the queue, goes on
the moment it is released, gives up with a clear error after the busy timeout, and never keeps
the queue after its transaction, committed or failed."""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from store import DatabaseError, InvariantError, NewMessage, Status, Store, ToolResultBlock, _engine

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def _queue_file(db_url: str) -> Path:
    return Path(db_url).with_name(Path(db_url).name + "-writer")


@contextmanager
def _held(path: Path) -> Iterator[None]:
    """The queue held as another process would: its own open file description."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _is_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


async def test_a_write_waits_for_the_queue_and_goes_on_when_it_is_released(
    store: Store, db_url: str
) -> None:
    tid = (await store.create_thread(kind="worker")).id
    queue = _queue_file(db_url)
    assert queue.exists() and _is_free(queue)
    with _held(queue):
        task = asyncio.create_task(store.append(tid, NewMessage.user("after the holder")))
        # the append waits in the kernel, off the loop: other work goes on meanwhile
        for _ in range(50):
            await asyncio.sleep(0)
        assert not task.done()
        assert (await store.get_thread(tid)).head_seq == 0  # reads never queue
    stored = await task
    assert [m.seq for m in stored] == [1]
    assert _is_free(queue)


async def test_a_write_gives_up_after_the_busy_timeout_naming_the_queue(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = (await store.create_thread(kind="worker")).id
    monkeypatch.setattr(_engine, "BUSY_TIMEOUT_MS", 50)
    with _held(_queue_file(db_url)):
        expected = "appending messages: database is locked: another writer has held .*-writer"
        with pytest.raises(DatabaseError, match=expected):
            await store.append(tid, NewMessage.user("never"))
    assert (await store.get_thread(tid)).head_seq == 0
    monkeypatch.undo()
    assert [m.seq for m in await store.append(tid, NewMessage.user("now"))] == [1]
    assert _is_free(_queue_file(db_url))


async def test_a_failed_write_releases_the_queue(store: Store, db_url: str) -> None:
    tid = (await store.create_thread(kind="worker")).id
    orphan = NewMessage(role="user", content=[ToolResultBlock(tool_use_id="nope", content="x")])
    with pytest.raises(InvariantError):
        await store.append(tid, orphan)
    assert _is_free(_queue_file(db_url))
    await store.set_status(tid, Status.QUEUED)
    assert _is_free(_queue_file(db_url))


async def test_two_stores_on_one_file_in_one_process_take_turns(db_url: str) -> None:
    a, b = await Store.open(db_url), await Store.open(db_url)
    try:
        ta = (await a.create_thread(kind="worker")).id
        tb = (await b.create_thread(kind="worker")).id

        async def write(s: Store, tid: str) -> None:
            for i in range(20):
                await s.append(tid, NewMessage.user(f"m{i}"))

        await asyncio.gather(write(a, ta), write(b, tb))
        assert (await a.get_thread(tb)).head_seq == 20
        assert (await b.get_thread(ta)).head_seq == 20
    finally:
        await a.close()
        await b.close()
    assert _is_free(_queue_file(db_url))


async def test_without_a_usable_queue_file_writes_go_straight_to_sqlite(db_url: str) -> None:
    """The sidecar cannot be opened (here: a directory stands in its place, as in a directory
    the store may not write to): writes are serialised by SQLite's lock alone, as before."""
    queue = _queue_file(db_url)
    assert not queue.exists()  # nothing has written yet
    queue.mkdir()
    again = await Store.open(db_url)
    try:
        tid = (await again.create_thread(kind="worker", messages=[NewMessage.user("hi")])).id
        await again.append(tid, NewMessage.assistant("still written"))
        assert [m.text for m in await again.messages(tid)] == ["hi", "still written"]
    finally:
        await again.close()
