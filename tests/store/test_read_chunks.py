"""A long segment is parsed and built ``CHUNK_ROWS`` rows at a time (``store._stored._build``):
what it gives is what validating each row gives, whatever falls on a chunk's edge — a row of
an unknown shape, a timestamp that changes, a message of several blocks — and what building
each row alone gives; built chunk by chunk as a reader fetches them, the same."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from store import Message
from store._stored import CHUNK_ROWS, segment_chunk, segment_messages

OWNER = "01m8vfkpjx7rke2v8j6665hmn1"

_SHAPES: list[list[dict[str, Any]]] = [
    [{"type": "text", "text": "plain"}],
    [{"type": "tool_use", "id": "tu1", "name": "bash", "input": {"command": "ls"}}],
    [{"type": "tool_result", "tool_use_id": "tu1", "content": "out", "is_error": False}],
    [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "thinking", "thinking": "unsigned"},
        {"type": "text", "text": "two blocks and more"},
    ],
    [
        {
            "type": "tool_result",
            "tool_use_id": "tu2",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "is_error": True,
        }
    ],
    [
        {
            "type": "tool_result",
            "tool_use_id": "tu3",
            "content": "head…tail",
            "is_error": False,
            "stored": {
                "chars": 9,
                "bytes": 11,
                "chunks": 1,
                "head": 4,
                "tail": 4,
                "sha256": "0" * 64,
            },
        }
    ],
]
_UNKNOWN = [{"text": "keys in another order: validated in full", "type": "text"}]


def _stamp(i: int) -> str:
    return f"2026-12-03 17:23:{i // 7 % 60:02d}.{i:06d}"  # a new one every 7 rows


def _rows(n: int) -> list[tuple[str, str, str]]:
    rows = []
    for i in range(n):
        content = _SHAPES[i % len(_SHAPES)]
        if i in (CHUNK_ROWS - 1, CHUNK_ROWS, 2 * CHUNK_ROWS):  # on a chunk's edges
            content = _UNKNOWN
        rows.append((json.dumps(content), "user" if i % 2 else "assistant", _stamp(i)))
    return rows


def _validated(seq: int, row: tuple[str, str, str]) -> Message:
    return Message.model_validate(
        {
            "role": row[1],
            "content": json.loads(row[0]),
            "seq": seq,
            "thread_id": OWNER,
            "created_at": datetime.fromisoformat(row[2]).replace(tzinfo=UTC),
        }
    )


def test_a_segment_of_several_chunks_is_what_validating_each_row_gives() -> None:
    n = 2 * CHUNK_ROWS + 3
    rows = _rows(n)
    got = segment_messages(OWNER, 11, rows)
    assert [m.seq for m in got] == list(range(11, 11 + n))
    for seq, row, m in zip(range(11, 11 + n), rows, got, strict=True):
        want = _validated(seq, row)
        assert m == want
        assert m.model_dump_json() == want.model_dump_json()
        assert m.model_dump() == want.model_dump()  # every field, defaults included
        assert [type(b) for b in m.content] == [type(b) for b in want.content]


def test_chunks_build_what_each_row_alone_builds() -> None:
    rows = _rows(CHUNK_ROWS + 1)
    whole = segment_messages(OWNER, 1, rows)
    alone = [segment_messages(OWNER, seq, [row])[0] for seq, row in enumerate(rows, 1)]
    assert whole == alone
    assert [m.model_dump_json() for m in whole] == [m.model_dump_json() for m in alone]
    assert len({id(m.content) for m in whole}) == len(whole)  # no list shared


def test_a_segment_built_chunk_by_chunk_as_fetched_is_the_whole_build() -> None:
    rows = _rows(2 * CHUNK_ROWS + 3)
    out: list[Message] = []
    for start in range(0, len(rows), 97):  # chunks of any size, as ``fetchmany`` gives them
        segment_chunk(OWNER, 1 + start, rows[start : start + 97], out)
    whole = segment_messages(OWNER, 1, rows)
    assert out == whole
    assert [m.model_dump_json() for m in out] == [m.model_dump_json() for m in whole]
