"""Refs, ids and the persisted shapes (no database)."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest

from store import (
    ContentBlock,
    Message,
    NewMessage,
    RefSyntaxError,
    Result,
    TextBlock,
    ThinkingBlock,
    ThreadRef,
    ToolResultBlock,
    ToolUseBlock,
    ValidationError,
    format_ref,
    new_id,
    validate_blocks,
)
from store.refs import _ALPHABET, ID_LENGTH

ID = "01m8vfkpjx7rke2v8j6665hmn1"


# ----------------------------------------------------------------- refs


@pytest.mark.parametrize(
    ("text", "start", "end", "open_end"),
    [
        (f"T-{ID}", None, None, False),
        (f"T-{ID}#7", 7, 7, False),
        (f"T-{ID}#7-12", 7, 12, False),
        (f"T-{ID}#7-", 7, None, True),
        ("T-01m8", None, None, False),
        ("T-01m8#1-", 1, None, True),
    ],
)
def test_ref_parses_and_formats_back_to_the_same_text(
    text: str, start: int | None, end: int | None, open_end: bool
) -> None:
    ref = ThreadRef.parse(text)
    assert (ref.start, ref.end, ref.open_end) == (start, end, open_end)
    assert str(ref) == text
    assert ThreadRef.parse(str(ref)) == ref


def test_ref_parse_normalises_case_whitespace_and_a_one_message_range() -> None:
    assert ThreadRef.parse(f"  t-{ID.upper()}#3-3 ") == ThreadRef(ID, 3, 3)
    assert str(ThreadRef.parse(f"T-{ID}#3-3")) == f"T-{ID}#3"


def test_ref_thread_drops_the_anchor_and_with_id_keeps_it() -> None:
    ref = ThreadRef.parse("T-01m8#4-9")
    assert ref.has_anchor and not ref.thread.has_anchor
    assert str(ref.with_id(ID)) == f"T-{ID}#4-9"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "T-",
        "T-01m",  # fewer than 4 id characters
        "T-01mi",  # i is not in the alphabet
        "T-01ml",
        "T-01mo",
        "T-01mu",
        "T-01m!8",
        "T-" + ID + "0",  # longer than an id
        f"T-{ID}#",
        f"T-{ID}#0",
        f"T-{ID}#0-3",
        f"T-{ID}#5-3",
        f"T-{ID}#x",
        f"T-{ID}#-3",
        f"T-{ID}#1-2-3",
        f"T-{ID}##1",
        f"T-{ID}#1 2",
        f"T-{ID}#+1",
    ],
)
def test_bad_ref_syntax_is_a_ref_syntax_error(bad: str) -> None:
    with pytest.raises(RefSyntaxError, match="bad ref"):
        ThreadRef.parse(bad)


def test_ref_syntax_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="bad ref"):
        ThreadRef.parse("T-x")


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ((ID,), f"T-{ID}"),
        ((ID, 3), f"T-{ID}#3"),
        ((ID, 3, 3), f"T-{ID}#3"),
        ((ID, 3, 9), f"T-{ID}#3-9"),
        ((ID, 3, None, True), f"T-{ID}#3-"),
    ],
)
def test_format_ref_writes_each_anchor_form(args: tuple[object, ...], text: str) -> None:
    assert format_ref(*args) == text  # type: ignore[arg-type]


# ----------------------------------------------------------------- ids


def test_new_ids_are_26_base32_characters_that_parse_as_refs() -> None:
    ident = new_id()
    assert len(ident) == ID_LENGTH
    assert set(ident) <= set(_ALPHABET)
    assert ThreadRef.parse(f"T-{ident}").id == ident


def test_new_ids_strictly_increase_within_a_process_even_in_one_millisecond() -> None:
    ids = [new_id() for _ in range(20_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    # many of them share a millisecond (their 10-character time prefix)
    assert len({i[:10] for i in ids}) < len(ids) / 2


def test_new_id_prefix_is_the_creation_time_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    ident = new_id()
    after = time.time_ns() // 1_000_000
    ms = 0
    for ch in ident[:10]:
        ms = ms * 32 + _ALPHABET.index(ch)
    assert before <= ms <= after


def test_ids_made_later_sort_after_earlier_ones() -> None:
    first = new_id()
    # wait for the clock to move on (not a sleep: spin on the clock itself)
    start = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 <= start + 1:
        pass
    assert new_id()[:10] > first[:10]


# ----------------------------------------------------------------- content blocks


def test_content_blocks_are_discriminated_by_type() -> None:
    blocks = validate_blocks(
        [
            {"type": "text", "text": "hi"},
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "tool_use", "id": "tu1", "name": "grep", "input": {"pattern": "x"}},
            {"type": "tool_result", "tool_use_id": "tu1", "content": "found"},
            {
                "type": "tool_result",
                "tool_use_id": "tu2",
                "content": [{"type": "text", "text": "a"}],
            },
        ]
    )
    assert [type(b) for b in blocks] == [
        TextBlock,
        ThinkingBlock,
        ToolUseBlock,
        ToolResultBlock,
        ToolResultBlock,
    ]
    assert isinstance(blocks[4], ToolResultBlock) and blocks[4].text == "a"


def test_content_blocks_round_trip_through_json() -> None:
    blocks: list[ContentBlock] = [
        TextBlock(text="é ✓"),
        ToolUseBlock(id="tu1", name="bash", input={"command": "ls", "n": [1, 2]}),
        ToolResultBlock(tool_use_id="tu1", content="out", is_error=True),
    ]
    text = json.dumps([b.model_dump(mode="json") for b in blocks])
    assert validate_blocks(json.loads(text)) == blocks


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "source": {}},
        {"text": "no type"},
        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}},
        {"type": "tool_use", "id": "", "name": "x", "input": {}},
        {"type": "tool_use", "id": "a", "name": "", "input": {}},
        {"type": "tool_result", "tool_use_id": ""},
        {"type": "text"},
    ],
)
def test_unknown_or_malformed_content_blocks_are_rejected(block: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        validate_blocks([block])


def test_new_message_accepts_a_string_as_one_text_block_and_refuses_empty_content() -> None:
    msg = NewMessage.model_validate({"role": "user", "content": "hello"})
    assert msg.content == [TextBlock(text="hello")]
    with pytest.raises(ValidationError):
        NewMessage(role="user", content=[])
    with pytest.raises(ValidationError):
        NewMessage.model_validate({"role": "system", "content": "x"})


def test_messages_are_frozen() -> None:
    msg = NewMessage.user("x")
    with pytest.raises(AttributeError, match="frozen"):
        msg.role = "assistant"  # type: ignore[misc]
    assert issubclass(Message, NewMessage)


# ----------------------------------------------------------------- the distilled result


def test_result_accepts_a_summary_of_exactly_2000_characters() -> None:
    assert len(Result(status="done", summary="x" * 2000).summary) == 2000


def test_result_refuses_a_summary_over_2000_characters() -> None:
    with pytest.raises(ValidationError, match="2000"):
        Result(status="done", summary="x" * 2001)


@pytest.mark.parametrize(
    "payload",
    [
        {"status": "finished", "summary": "s"},
        {"status": "done"},
        {"status": "done", "summary": "s", "changes": [{"path": "a.py", "action": "renamed"}]},
        {"status": "done", "summary": "s", "changes": [{"path": "", "action": "added"}]},
        {"status": "done", "summary": "s", "findings": [{"claim": "", "evidence": []}]},
        {"status": "done", "summary": "s", "verification": [{"command": "", "outcome": "ok"}]},
        {"status": "done", "summary": "s", "unexpected": 1},
    ],
)
def test_result_refuses_invalid_submissions(payload: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Result.model_validate(payload)


def test_result_round_trips_through_json() -> None:
    result = Result.model_validate(
        {
            "status": "partial",
            "summary": "fixed one of two",
            "findings": [{"claim": "off by one", "evidence": ["T-01m8#3"]}],
            "changes": [{"path": "a.py", "action": "modified"}],
            "verification": [{"command": "pytest", "outcome": "1 failed"}],
            "negative_results": ["tried X"],
            "open_questions": ["why Y?"],
            "usage": {"input_tokens": 5},
        }
    )
    assert Result.model_validate_json(result.model_dump_json()) == result


def _id_in_child(out: int) -> None:
    os.write(out, new_id().encode())


def test_a_forked_process_does_not_repeat_its_parents_next_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child forked from a process that just made an id must not continue the parent's
    sequence: in the same millisecond both would make the same "next" id."""
    frozen = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: frozen)  # one millisecond, forever
    new_id()
    r, w = os.pipe()
    child = multiprocessing.get_context("fork").Process(target=_id_in_child, args=(w,))
    child.start()
    os.close(w)
    try:
        child_id = os.read(r, 64).decode()
    finally:
        os.close(r)
        child.join()
    assert len(child_id) == ID_LENGTH
    assert child_id != new_id()
