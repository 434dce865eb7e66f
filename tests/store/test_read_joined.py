"""A long segment of a SQLite history is read ``CHUNK_ROWS`` messages a row
(``_history.JOINED_CHUNK_SQL``, built by ``_stored.joined_chunk``): the messages are those the
SQLAlchemy read plan gives, in seq order, for threads whose messages were written interleaved
with other threads', across chunk edges and fork points; a stored row of a shape the builder does
not know is validated in its place; a row that cannot be read is an error naming where."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from store import (
    Message,
    NewMessage,
    Store,
    StoreError,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from store._stored import CHUNK_ROWS

from .helpers import validated_messages

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

N = 2 * CHUNK_ROWS + 7


async def _orm(
    store: Store, thread_id: str, start: int = 1, end: int | None = None
) -> list[Message]:
    return await validated_messages(store, thread_id, start, end)


def _turns(i: int) -> list[NewMessage]:
    """A tool turn of assorted shapes (thinking, text, calls, a result of parts, an error)."""
    use = ToolUseBlock(id=f"toolu_{i}", name="bash", input={"command": f"echo {i}", "n": i})
    parts = [TextBlock(text=f"part {i}"), TextBlock(text="then")] if i % 3 == 0 else f"out {i}"
    return [
        NewMessage(
            role="assistant",
            content=[ThinkingBlock(thinking=f"why {i}", signature="s" if i % 2 else None), use],
        ),
        NewMessage(
            role="user",
            content=[ToolResultBlock(tool_use_id=use.id, content=parts, is_error=i % 5 == 0)],
        ),
    ]


async def test_long_histories_written_interleaved_read_as_the_orm_reads_them(
    store: Store,
) -> None:
    a = await store.create_thread(kind="worker", messages=[NewMessage.user("a")])
    b = await store.create_thread(kind="worker", messages=[NewMessage.user("b")])
    for i in range(N // 2):  # the two threads' rows interleave in the table
        await store.append(a.id, _turns(i))
        await store.append(b.id, [NewMessage.user(f"b{i}"), NewMessage.assistant(f"b{i}")])
    fork = await store.fork(a.id, at=CHUNK_ROWS + 3, messages=[NewMessage.user("forked")])
    for tid in (a.id, b.id, fork.id):
        head = (await store.get_thread(tid)).head_seq
        assert head > CHUNK_ROWS
        got = await store.messages(tid)
        assert [m.seq for m in got] == list(range(1, head + 1))
        assert got == await _orm(store, tid)
        for start, end in ((CHUNK_ROWS, None), (2, 2 * CHUNK_ROWS + 1), (CHUNK_ROWS + 1, head)):
            assert await store.messages(tid, start=start, end=end) == await _orm(
                store, tid, start, end
            )
    assert (await store.messages(fork.id))[-1].text == "forked"


def _insert(path: Path, thread_id: str, contents: list[str]) -> None:
    """Rows written by something else than this store (another version, a hand), at the end
    of a thread."""
    conn = sqlite3.connect(path)
    try:
        head = conn.execute("SELECT head_seq FROM threads WHERE id = ?", (thread_id,)).fetchone()[0]
        with conn:
            for i, content in enumerate(contents, head + 1):
                conn.execute(
                    "INSERT INTO messages (thread_id, seq, role, content, created_at)"
                    " VALUES (?, ?, 'user', ?, '2026-12-05 10:00:00.000001')",
                    (thread_id, i, content),
                )
            conn.execute(
                "UPDATE threads SET head_seq = ? WHERE id = ?", (head + len(contents), thread_id)
            )
    finally:
        conn.close()


async def test_a_row_of_an_unknown_shape_inside_a_long_segment_is_validated(
    store: Store, db_url: str
) -> None:
    talk = [NewMessage.user(f"u{i}") for i in range(CHUNK_ROWS + 10)]
    t = await store.create_thread(kind="worker", messages=talk)
    other = json.dumps([{"text": "keys in another order", "type": "text"}])
    _insert(Path(db_url), t.id, [other] + [json.dumps([{"type": "text", "text": "x"}])] * 5)
    got = await store.messages(t.id)
    assert len(got) == CHUNK_ROWS + 16
    assert got[CHUNK_ROWS + 10].content == [TextBlock(text="keys in another order")]
    assert got == await _orm(store, t.id)


async def test_a_long_segment_with_a_row_that_is_not_json_names_where(
    store: Store, db_url: str
) -> None:
    t = await store.create_thread(
        kind="worker", messages=[NewMessage.user(f"u{i}") for i in range(CHUNK_ROWS + 10)]
    )
    _insert(Path(db_url), t.id, ['[{"type": "text", "text": "cut'])
    where = f"#{CHUNK_ROWS + 1}-{CHUNK_ROWS + 11}"
    with pytest.raises(StoreError, match=rf"{t.ref}: stored messages {where} cannot be read"):
        await store.messages(t.id)
    assert len(await store.messages(t.id, end=CHUNK_ROWS)) == CHUNK_ROWS  # the rest reads
