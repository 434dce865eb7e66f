"""Many writers and readers at once, in one process and across processes: every append lands,
and no "database is locked" ever reaches a caller."""

from __future__ import annotations

import asyncio

import pytest

from store import NewMessage, Store

from .helpers import Procs

WRITERS = 32
APPENDS = 20
PROC_APPENDS = 12


async def _check_threads(store: Store, counts: dict[str, int]) -> None:
    for tid, n in counts.items():
        msgs = await store.messages(tid)
        assert [m.seq for m in msgs] == list(range(1, n + 1))
        assert [m.text for m in msgs] == [f"{tid} message {i}" for i in range(1, n + 1)]


async def test_32_writers_and_concurrent_readers_in_one_process_all_succeed(
    store: Store,
) -> None:
    threads = [(await store.create_thread(kind="worker")).id for _ in range(WRITERS)]
    writing = asyncio.Event()
    reads = 0

    async def writer(tid: str) -> None:
        for n in range(1, APPENDS + 1):
            role = "user" if n % 2 else "assistant"
            stored = await store.append(tid, NewMessage(role=role, content=f"{tid} message {n}"))
            assert stored[0].seq == n
        writing.set()

    async def reader(i: int) -> None:
        nonlocal reads
        while not all(w.done() for w in writers):
            tid = threads[(i + reads) % WRITERS]
            info = await store.get_thread(tid)
            msgs = await store.messages(tid)
            # a consistent snapshot: never a torn read, never fewer rows than the head said
            assert [m.seq for m in msgs][: info.head_seq] == list(range(1, info.head_seq + 1))
            await store.search("message")
            reads += 1

    writers = [asyncio.create_task(writer(t)) for t in threads]
    readers = [asyncio.create_task(reader(i)) for i in range(4)]
    outcomes = await asyncio.gather(*writers, *readers, return_exceptions=True)
    errors = [repr(o) for o in outcomes if isinstance(o, BaseException)]
    assert errors == []
    assert reads > 0
    await _check_threads(store, dict.fromkeys(threads, APPENDS))


async def test_4_processes_of_8_writers_each_on_one_database_all_succeed(
    store: Store, db_url: str, procs: Procs
) -> None:
    # each writer reads its thread back after every append (as a worker loop does) and one
    # monitor per process keeps listing threads and reading their tails
    cmd = {
        "op": "write",
        "url": db_url,
        "writers": 8,
        "appends": PROC_APPENDS,
        "readers": 1,
        "pause": 0.05,
    }
    answers = await asyncio.to_thread(procs.broadcast, cmd)
    errors = [e for a in answers for e in a["errors"]]
    assert errors == []  # in particular, no "database is locked"
    counts: dict[str, int] = {}
    for a in answers:
        assert a["ok"] and a["reads"] > 0
        counts.update(a["threads"])
    assert len(counts) == 32 and set(counts.values()) == {PROC_APPENDS}
    await _check_threads(store, counts)
    assert len(await store.list_threads()) == 32


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_the_database_is_intact_after_concurrent_writers(store: Store) -> None:
    threads = [(await store.create_thread(kind="worker")).id for _ in range(8)]
    await asyncio.gather(
        *(store.append(t, NewMessage.user(f"{t} message {i}")) for t in threads for i in range(5))
    )

    assert await store.db.read(lambda tx: tx.fetchall("PRAGMA integrity_check")) == [("ok",)]
