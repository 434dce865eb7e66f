"""SQLite reads of a few messages run on the event loop's thread, larger ones (many rows, or much
text) in the reader's pool (issue 11): either way a range reads the same messages as the
SQLAlchemy read plan, directly and through a three-deep fork chain, for every range shape."""

from __future__ import annotations

import pytest

from store import Message, NewMessage, Store, _history

from .helpers import validated_messages

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


async def _orm(store: Store, thread_id: str, start: int, end: int | None) -> list[Message]:
    return await validated_messages(store, thread_id, start, end)


def _talk(n: int, *, start: int, size: int = 1) -> list[NewMessage]:
    return [
        NewMessage.user(f"u{start + i} " + "x" * size)
        if i % 2 == 0
        else NewMessage.assistant(f"a{start + i}")
        for i in range(n)
    ]


async def _chain(store: Store, n: int, *, size: int = 1) -> tuple[str, str]:
    """A thread of ``n`` messages and the last of three forks down from it, each forked one
    message before its parent's end and given four messages of its own: the last dozen
    messages of the last fork come from all four threads."""
    root = await store.create_thread(kind="worker", messages=_talk(n, start=1, size=size))
    tip = root
    for _ in range(3):
        at = tip.head_seq - 1
        tip = await store.fork(tip.id, at=at, messages=_talk(4, start=at + 1, size=size))
    return root.id, tip.id


@pytest.mark.parametrize("n", [12, _history.INLINE_ROWS + 40])
async def test_every_range_reads_what_the_sqlalchemy_plan_reads(store: Store, n: int) -> None:
    root, tip = await _chain(store, n)
    for tid in (root, tip):
        head = (await store.get_thread(tid)).head_seq
        ranges = [(1, None), (head - 9, None), (head, None), (2, 5), (head - 6, head - 1)]
        ranges += [(head + 1, None), (1, head + 10), (3, 2)]
        for start, end in ranges:
            got = await store.messages(tid, start=start, end=end)
            assert got == await _orm(store, tid, start, end), (tid, start, end)
        whole = await store.messages(tid)
        assert [m.seq for m in whole] == list(range(1, head + 1))
    assert len({m.thread_id for m in await store.messages(tip, start=n - 3)}) == 4


async def test_a_few_large_messages_read_the_same_as_small_ones(store: Store) -> None:
    root, tip = await _chain(store, 10, size=_history.INLINE_CHARS // 4)
    for tid in (root, tip):
        got = await store.messages(tid)
        assert got == await _orm(store, tid, 1, None)
        assert sum(len(m.text) for m in got) > _history.INLINE_CHARS


async def test_reading_a_missing_thread_says_which(store: Store) -> None:
    from store import ThreadNotFound

    with pytest.raises(ThreadNotFound, match="T-00000000000000000000000000"):
        await store.messages("0" * 26)
