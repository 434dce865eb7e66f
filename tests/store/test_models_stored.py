"""Stored rows are built into models without validating them again (``store._stored``): what a
read gives is exactly what validating the stored JSON gives — the models, their JSON, their
defaults — for every block shape the store writes, on both backends; a row of any other shape
is validated in full; and a large build hands the garbage collector back as it found it."""

from __future__ import annotations

import gc
import json
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest

from store import (
    INLINE_LIMIT,
    Change,
    ContentBlock,
    Effects,
    Message,
    NewMessage,
    Store,
    StoredOutput,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    ValidationError,
)
from store._stored import (
    EFFECTS_SHAPES,
    GC_PAUSE_ROWS,
    KNOWN_SHAPES,
    STORED_OUTPUT_SHAPE,
    gc_paused,
    segment_messages,
)
from store.models import BLOCK_CLASSES

OWNER = "01m8vfkpjx7rke2v8j6665hmn1"
STAMP = "2026-12-03 17:23:20.990790"


def _every_shape() -> list[NewMessage]:
    """One message per block shape the store writes (and a few blocks to a message)."""
    return [
        NewMessage.user("hello"),
        NewMessage(
            role="assistant",
            content=[
                ThinkingBlock(thinking="hmm", signature="sig"),
                ThinkingBlock(thinking="no signature"),
                TextBlock(text='é ✓ "quoted" \\ back'),
                ToolUseBlock(id="tu1", name="bash", input={"command": "ls", "n": [1, {"a": None}]}),
                ToolUseBlock(id="tu2", name="grep"),
                ToolUseBlock(id="tu3", name="big"),
                ToolUseBlock(id="tu4", name="bash"),
                ToolUseBlock(id="tu5", name="write_file"),
                ToolUseBlock(id="tu6", name="bash"),
            ],
        ),
        NewMessage(
            role="user",
            content=[
                ToolResultBlock(tool_use_id="tu1", content="out"),
                ToolResultBlock(
                    tool_use_id="tu2",
                    content=[TextBlock(text="a"), TextBlock(text="b")],
                    is_error=True,
                ),
                ToolResultBlock(tool_use_id="tu3", content="x" * (INLINE_LIMIT + 10)),  # apart
                ToolResultBlock(
                    tool_use_id="tu4",
                    content="[exit code: 1]",
                    effects=Effects(
                        exit_code=1,
                        changed=[Change(path="a.py", action="modified")],
                    ),
                ),
                ToolResultBlock(
                    tool_use_id="tu5",
                    content="Created b",
                    effects=Effects(changed=[Change(path="b", action="added")], complete=True),
                ),
                ToolResultBlock(  # recorded, and stored apart
                    tool_use_id="tu6",
                    content="y" * (INLINE_LIMIT + 10),
                    effects=Effects(exit_code=0, complete=False),
                ),
            ],
        ),
        NewMessage.assistant("done"),
    ]


def _same(got: Message, want: Message) -> None:
    assert got == want
    assert got.model_dump_json() == want.model_dump_json()
    assert got.model_dump(mode="json", exclude_none=True) == want.model_dump(
        mode="json", exclude_none=True
    )
    assert got.model_dump() == want.model_dump()  # every field, defaults included
    assert [type(b) for b in got.content] == [type(b) for b in want.content]


async def test_every_stored_shape_reads_back_as_validating_its_row_gives(store: Store) -> None:
    appended = (await store.create_thread(kind="worker", messages=_every_shape())).id
    stored = await store.messages(appended)
    apart = stored[2].content[2]
    assert isinstance(apart, ToolResultBlock) and apart.stored is not None  # stored apart

    q = "SELECT seq, role, content FROM messages WHERE thread_id = :t ORDER BY seq"
    rows = await store.db.read(lambda tx: tx.fetchall(q, {"t": appended}))
    for (seq, role, content), got in zip(rows, stored, strict=True):
        want = Message.model_validate(
            {
                "role": role,
                "content": json.loads(content),
                "seq": seq,
                "thread_id": appended,
                "created_at": got.created_at,
            }
        )
        _same(got, want)
        assert got.created_at.tzinfo is not None
        assert got.created_at.utcoffset() == want.created_at.utcoffset()
    assert [m.model_dump_json() for m in await store.messages(appended, start=2, end=3)] == [
        m.model_dump_json() for m in stored[1:3]
    ]


async def test_models_built_from_rows_stay_frozen_and_copy_and_pickle(store: Store) -> None:
    tid = (await store.create_thread(kind="worker", messages=_every_shape())).id
    msg = (await store.messages(tid))[1]
    with pytest.raises(AttributeError, match="frozen"):
        msg.seq = 9  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        msg.content[0].thinking = "x"  # type: ignore[union-attr,misc]
    assert pickle.loads(pickle.dumps(msg)) == msg
    copy = msg.model_copy(update={"seq": 7})
    assert copy.seq == 7 and msg.seq == 2 and copy.content == msg.content


def test_known_shapes_are_what_the_models_dump() -> None:
    dumped = {
        tuple(b.model_dump(mode="json", exclude_none=True))
        for m in _every_shape()
        for b in m.content
    }
    dumped.add(("type", "tool_use_id", "content", "is_error", "stored"))  # stored apart
    dumped.add(("type", "tool_use_id", "content", "is_error", "stored", "effects"))
    assert dumped == set(KNOWN_SHAPES)
    for keys, cls in KNOWN_SHAPES.items():
        fields = list(cls.field_names)
        assert list(keys) == [f for f in fields if f in keys]  # the models' order
        assert keys[0] == "type" and BLOCK_CLASSES[cls.type] is cls  # type: ignore[attr-defined]
        for missing in set(fields) - set(keys):
            assert getattr(cls, missing) is None  # the class default a row leaves out
    assert StoredOutput.field_names == STORED_OUTPUT_SHAPE
    assert (Effects.field_names, Effects.field_names[1:]) == EFFECTS_SHAPES


def _row(content: Any, role: str = "user") -> tuple[str, str, str]:
    return (json.dumps(content), role, STAMP)


def _validated(seq: int, row: tuple[str, str, str]) -> Message:
    return Message.model_validate(
        {
            "role": row[1],
            "content": json.loads(row[0]),
            "seq": seq,
            "thread_id": OWNER,
            "created_at": datetime.fromisoformat(STAMP).replace(tzinfo=UTC),
        }
    )


@pytest.mark.parametrize(
    "content",
    [
        [{"text": "keys in another order", "type": "text"}],
        "a string: the shorthand of one text block",
        [{"type": "tool_result", "tool_use_id": "a", "content": "x"}],  # is_error left out
        [
            {
                "type": "tool_result",
                "tool_use_id": "a",
                "content": "x",
                "is_error": False,
                "stored": None,
            }
        ],
        [{"type": "tool_use", "id": "a", "name": "n"}],  # input left out
        [{"type": "thinking", "signature": None, "thinking": "t"}],
        [{"type": "text", "text": "ok"}, {"type": "tool_use", "name": "n", "id": "a", "input": {}}],
        [
            {
                "type": "tool_result",
                "tool_use_id": "a",
                "content": [{"text": "b", "type": "text"}],
                "is_error": False,
            }
        ],
    ],
)
def test_a_row_of_another_shape_is_validated_in_full(content: list[Any]) -> None:
    rows = [
        _row([{"type": "text", "text": "before"}]),
        _row(content),
        _row([{"type": "text", "text": "after"}]),
    ]
    got = segment_messages(OWNER, 5, rows)
    assert [m.seq for m in got] == [5, 6, 7]
    for seq, row, m in zip((5, 6, 7), rows, got, strict=True):
        _same(m, _validated(seq, row))


@pytest.mark.parametrize(
    "content",
    [
        [],
        [{"type": "image", "source": {}}],
        [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}],
        [{"type": "thinking", "text": "a text block's keys, another type"}],
        [["type", "text"]],
    ],
)
def test_a_row_no_model_accepts_is_refused_as_validation_refuses_it(content: Any) -> None:
    with pytest.raises(ValidationError):
        segment_messages(OWNER, 1, [_row(content)])


def test_a_large_build_gives_the_collector_back_as_it_found_it() -> None:
    rows = [
        _row([{"type": "text", "text": f"m{i}"}], "user" if i % 2 else "assistant")
        for i in range(GC_PAUSE_ROWS)
    ]
    assert gc.isenabled()
    got = segment_messages(OWNER, 1, rows)
    assert gc.isenabled() and len(got) == GC_PAUSE_ROWS and got[-1].text == f"m{GC_PAUSE_ROWS - 1}"
    with gc_paused(GC_PAUSE_ROWS):  # concurrent builds: the last one out turns it back on
        assert not gc.isenabled()
        segment_messages(OWNER, 1, rows)
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        segment_messages(OWNER, 1, rows)
        assert not gc.isenabled()  # never turned on where the process had turned it off
    finally:
        gc.enable()


def test_trusted_builds_what_validation_builds() -> None:
    content: list[ContentBlock] = [
        TextBlock(text="a"),
        ToolResultBlock(tool_use_id="t", content="out"),
    ]
    want = NewMessage(role="user", content=content)
    got = NewMessage.trusted({"role": "user", "content": content})
    assert type(got) is NewMessage
    assert got == want and got.model_dump_json() == want.model_dump_json()
    block = ToolResultBlock(tool_use_id="t", content="x", is_error=True)
    values = {"type": "tool_result", "tool_use_id": "t", "content": "x", "is_error": True}
    built = ToolResultBlock.trusted(values)  # stored and effects left out: the class defaults
    assert built.stored is None and built.effects is None
    assert built == block and built.model_dump() == block.model_dump()
    assert built.model_dump_json(exclude_none=True) == json.dumps(values, separators=(",", ":"))


def _result_json() -> dict[str, Any]:
    return {
        "status": "done",
        "summary": "s",
        "findings": [{"claim": "c", "evidence": ["T-0123#4"]}],
        "changes": [{"path": "a.py", "action": "modified"}],
        "verification": [{"command": "pytest", "outcome": "3 passed"}],
        "negative_results": [],
        "open_questions": ["q"],
        "ref": "T-0123",
        "turns": 4,
        "usage": {"input_tokens": 3, "output_tokens": 2},
        "duration_s": 1.5,
        "dropped_evidence": 0,
        "check": {
            "verdict": "verified",
            "claims": [{"kind": "finding", "index": 0, "verdict": "verified", "reason": "r"}],
            "rounds": 1,
        },
    }


@pytest.mark.parametrize(
    "stored",
    [
        _result_json(),
        {"status": "failed", "summary": "as an older version wrote it: no lists, no check"},
        {**_result_json(), "check": None, "usage": None},
    ],
)
def test_a_stored_result_is_built_as_validating_it_gives(stored: dict[str, Any]) -> None:
    from store import Result

    text = json.dumps(stored)
    got = Result.from_stored(json.loads(text))
    want = Result.model_validate(json.loads(text))
    assert got == want and got.model_dump() == want.model_dump()
    assert {type(f) for f in got.findings} <= {type(f) for f in want.findings}
    assert got.check is None or type(got.check.claims[0]) is type(want.check.claims[0])  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "stored",
    [
        {**_result_json(), "extra": 1},
        {"status": "done"},
        {**_result_json(), "findings": "not a list"},
        {**_result_json(), "usage": [1, 2]},
    ],
)
def test_a_stored_result_of_another_shape_is_validated(stored: dict[str, Any]) -> None:
    """A key the store does not write, a required one missing, a list where a record goes (or
    the reverse): validated in full, and refused. Values of a known shape are the store's own
    and are not checked again."""
    from store import Result

    with pytest.raises(ValidationError):
        Result.from_stored(json.loads(json.dumps(stored)))
