"""Appending: numbering, the pairing invariant of SPEC §Threads, and all-or-nothing appends."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from store import (
    InvariantError,
    NewMessage,
    Store,
    TextBlock,
    ThreadNotFound,
    ToolResultBlock,
    ToolUseBlock,
    UsageRecord,
)

from .helpers import assistant, calls, count_rows, results, shape, thinking, user


async def _thread(store: Store, *msgs: NewMessage) -> str:
    return (await store.create_thread(kind="worker", messages=list(msgs))).id


async def test_appends_are_numbered_from_one_and_read_back_in_order(store: Store) -> None:
    tid = await _thread(store)
    first = await store.append(tid, user("hello"))
    rest = await store.append(tid, [calls("a"), results("a"), assistant("done")])
    assert [m.seq for m in first + rest] == [1, 2, 3, 4]
    assert shape(await store.messages(tid)) == shape(first + rest)
    info = await store.get_thread(tid)
    assert info.head_seq == 4
    assert info.version == 3  # created, then two appends


async def test_a_lone_surrogate_in_a_reply_is_stored_as_a_replacement_character(
    store: Store,
) -> None:
    """A model's JSON may hold ``"\\ud800"``: the reply has a lone surrogate, which neither
    database can encode (the append failed with UnicodeEncodeError and the run stopped). It is
    stored as U+FFFD wherever it is, the append returns the message as stored, and the rest of
    the thread is unaffected."""
    tid = await _thread(store, user("go"))
    reply = NewMessage(
        role="assistant",
        content=[
            TextBlock(text="alpha\ud800b \udfff gamma"),
            ToolUseBlock(id="t1", name="bash", input={"command": "echo \udc80x"}),
        ],
    )
    appended = await store.append(tid, reply)
    await store.append(
        tid, NewMessage(role="user", content=[ToolResultBlock(tool_use_id="t1", content="ok")])
    )
    stored = await store.messages(tid)
    assert shape(stored[1:2]) == shape(appended)
    text, call = stored[1].content
    assert isinstance(text, TextBlock) and text.text == "alpha\ufffdb \ufffd gamma"
    assert isinstance(call, ToolUseBlock) and call.input == {"command": "echo \ufffdx"}
    hits = await store.search("gamma")
    assert [(h.thread_id, h.seq) for h in hits] == [(tid, 2)]
    assert (await store.get_thread(tid)).head_seq == 3


async def test_an_empty_append_is_a_no_op(store: Store) -> None:
    tid = await _thread(store, user("x"))
    assert await store.append(tid, []) == []
    assert (await store.get_thread(tid)).head_seq == 1


async def test_append_to_a_missing_thread_is_thread_not_found(store: Store) -> None:
    with pytest.raises(ThreadNotFound):
        await store.append("0" * 26, user("x"))


@pytest.mark.parametrize(
    ("bounds", "says"),
    [
        ({"start": 2.5}, "start must be a message number (an int), not 2.5"),
        ({"start": "2"}, "start must be a message number (an int), not '2'"),
        ({"start": True}, "start must be a message number (an int), not True"),
        ({"end": 1.0}, "end must be a message number (an int), not 1.0"),
    ],
)
async def test_a_range_bound_that_is_not_an_int_is_a_type_error_naming_it(
    store: Store, bounds: dict[str, Any], says: str
) -> None:
    """From Python, ``start=2.5`` read nothing and ``start="2"`` failed deep in the read with
    an unrelated comparison error; an int-like bound (``numpy.int64``, ``__index__``) reads."""

    class Two:
        def __index__(self) -> int:
            return 2

    tid = await _thread(store, user("a"), assistant("b"), user("c"))
    with pytest.raises(TypeError) as err:
        await store.messages(tid, **bounds)
    assert str(err.value) == says
    assert [m.seq for m in await store.messages(tid, start=Two())] == [2, 3]  # type: ignore[arg-type]


async def test_several_tool_uses_may_be_answered_in_any_order(store: Store) -> None:
    tid = await _thread(store, user("go"))
    await store.append(tid, calls("a", "b", "c"))
    await store.append(tid, results("c", "a", "b", text="and a note after the results"))
    await store.append(tid, calls("d"))
    await store.append(tid, results("d"))
    assert (await store.get_thread(tid)).head_seq == 5


async def test_assistant_messages_may_follow_each_other_without_tool_calls(store: Store) -> None:
    tid = await _thread(store, user("go"))
    await store.append(tid, [assistant("one"), assistant("two"), user("three"), user("four")])
    assert (await store.get_thread(tid)).head_seq == 5


def _blocks(role: str, *blocks: Any) -> NewMessage:
    return NewMessage(role=role, content=list(blocks))


# (history, refused append, words the error must contain)
REFUSED: list[tuple[str, list[NewMessage], list[NewMessage], list[str]]] = [
    (
        "first message from the assistant",
        [],
        [assistant("hi")],
        ["message 1", "starts with a user"],
    ),
    (
        "tool_use left unanswered by a plain user message",
        [user("go"), calls("a")],
        [user("never mind")],
        ["message 3", "a", "unanswered"],
    ),
    (
        "tool_use answered only in part",
        [user("go"), calls("a", "b")],
        [results("a")],
        ["b", "unanswered"],
    ),
    (
        "assistant speaks while a tool_use is unanswered",
        [user("go"), calls("a")],
        [assistant("moving on")],
        ["unanswered", "a"],
    ),
    (
        "tool_result with no tool_use",
        [user("go"), assistant("no tools")],
        [results("ghost")],
        ["ghost", "answers no tool_use"],
    ),
    (
        "tool_result for an id of an older message",
        [user("go"), calls("a"), results("a"), calls("b")],
        [results("a", "b")],
        ["a", "answers no tool_use"],
    ),
    (
        "duplicate tool_result",
        [user("go"), calls("a")],
        [results("a", "a")],
        ["a", "more than once"],
    ),
    (
        "duplicate tool_use ids",
        [user("go")],
        [calls("a", "a")],
        ["duplicate tool_use"],
    ),
    (
        "tool_results not first in the user message",
        [user("go"), calls("a")],
        [_blocks("user", TextBlock(text="here"), ToolResultBlock(tool_use_id="a"))],
        ["must come first"],
    ),
    (
        "thinking in a user message",
        [user("go")],
        [_blocks("user", thinking("I am the user"))],
        ["user message cannot hold thinking"],
    ),
    (
        "tool_use in a user message",
        [user("go")],
        [_blocks("user", ToolUseBlock(id="x", name="bash"))],
        ["user message cannot hold tool_use"],
    ),
    (
        "tool_result in an assistant message",
        [user("go"), calls("a")],
        [results("a"), _blocks("assistant", ToolResultBlock(tool_use_id="a"))],
        ["assistant message cannot hold tool_result"],
    ),
    (
        "a valid message followed by an invalid one in the same append",
        [user("go")],
        [calls("a"), assistant("skipped the result")],
        ["message 3", "unanswered"],
    ),
]


@pytest.mark.parametrize(
    ("history", "bad", "words"),
    [pytest.param(h, b, w, id=name) for name, h, b, w in REFUSED],
)
async def test_an_append_that_breaks_pairing_is_refused_and_stores_nothing(
    store: Store, history: list[NewMessage], bad: list[NewMessage], words: list[str]
) -> None:
    tid = await _thread(store, *history)
    before = await store.get_thread(tid)
    rows = await count_rows(store, "messages")
    fts = await count_rows(store, "messages_fts")
    with pytest.raises(InvariantError) as err:
        await store.append(tid, bad, usage=UsageRecord(model="m", usage={"output_tokens": 1}))
    for word in words:
        assert word in str(err.value)
    assert f"T-{tid}" in str(err.value)
    after = await store.get_thread(tid)
    assert (after.head_seq, after.version) == (before.head_seq, before.version)
    assert await count_rows(store, "messages") == rows
    assert await count_rows(store, "messages_fts") == fts
    assert await count_rows(store, "usage") == 0
    # the thread is still usable: the refused append changed no pairing state either
    assert shape(await store.messages(tid)) == shape(
        await store.messages(tid, start=1, end=len(history))
    )


@pytest.mark.parametrize(
    ("history", "bad", "words"),
    [pytest.param(h, b, w, id=name) for name, h, b, w in REFUSED if h],
)
async def test_creating_a_thread_with_a_broken_history_is_refused_and_creates_nothing(
    store: Store, history: list[NewMessage], bad: list[NewMessage], words: list[str]
) -> None:
    with pytest.raises(InvariantError):
        await store.create_thread(kind="worker", messages=[*history, *bad])
    assert await count_rows(store, "threads") == 0
    assert await count_rows(store, "messages") == 0


async def test_a_refused_append_does_not_spoil_concurrent_appends_in_the_same_commit(
    store: Store,
) -> None:
    good = [await _thread(store, user(f"t{i}")) for i in range(6)]
    bad = await _thread(store, user("go"), calls("a"))
    outcomes = await asyncio.gather(
        *(store.append(t, assistant("ok")) for t in good),
        store.append(bad, assistant("breaks pairing")),
        return_exceptions=True,
    )
    assert all(isinstance(o, list) and o[0].seq == 2 for o in outcomes[:-1])
    assert isinstance(outcomes[-1], InvariantError)
    assert (await store.get_thread(bad)).head_seq == 2
    for i, t in enumerate(good):
        assert [m.text for m in await store.messages(t)] == [f"t{i}", "ok"]


async def test_concurrent_appends_to_one_thread_get_distinct_consecutive_seqs(
    store: Store,
) -> None:
    tid = await _thread(store, user("go"))
    outs = await asyncio.gather(*(store.append(tid, assistant(f"m{i}")) for i in range(40)))
    seqs = sorted(m.seq for out in outs for m in out)
    assert seqs == list(range(2, 42))
    stored = await store.messages(tid)
    assert [m.seq for m in stored] == list(range(1, 42))
    by_seq = {m.seq: m.text for out in outs for m in out}
    assert all(by_seq[m.seq] == m.text for m in stored[1:])


# ----------------------------------------------------------------- property test


def _reference_accepts(history: Sequence[NewMessage], batch: Sequence[NewMessage]) -> bool:
    """The pairing invariant, written plainly and independently of store._invariants."""
    msgs = [*history, *batch]
    for i in range(len(history), len(msgs)):
        msg, prev = msgs[i], (msgs[i - 1] if i else None)
        kinds = [b.type for b in msg.content]
        asked = (
            [b.id for b in prev.content if isinstance(b, ToolUseBlock)]
            if prev is not None and prev.role == "assistant"
            else []
        )
        if i == 0 and msg.role != "user":
            return False
        if msg.role == "assistant":
            if asked or "tool_result" in kinds:
                return False
            ids = [b.id for b in msg.content if isinstance(b, ToolUseBlock)]
            if len(ids) != len(set(ids)):
                return False
        else:
            if "tool_use" in kinds or "thinking" in kinds:
                return False
            n = kinds.count("tool_result")
            if kinds[:n] != ["tool_result"] * n:
                return False
            answered = [b.tool_use_id for b in msg.content if isinstance(b, ToolResultBlock)]
            if sorted(answered) != sorted(asked):  # also refuses duplicates and strangers
                return False
    return True


@st.composite
def _message(draw: st.DrawFn, asked: list[str], counter: list[int]) -> NewMessage:
    """A message that is usually a sensible next step after ``asked`` (the previous message's
    tool_use ids), and sometimes slightly wrong."""

    def fresh() -> str:
        counter[0] += 1
        return f"tu{counter[0]}"

    kind = draw(st.sampled_from(["answer", "answer", "user", "assistant", "assistant", "odd"]))
    blocks: list[Any]
    if kind == "answer":
        ids = list(draw(st.permutations(asked))) if asked else []
        mutation = draw(st.sampled_from(["none", "none", "none", "drop", "extra", "dupe", "late"]))
        if mutation == "drop" and ids:
            ids.pop()
        elif mutation == "extra":
            ids.append(draw(st.sampled_from(["tu1", "ghost", fresh()])))
        elif mutation == "dupe" and ids:
            ids.append(ids[0])
        blocks = [ToolResultBlock(tool_use_id=i, content="r") for i in ids]
        if mutation == "late" or not blocks or draw(st.booleans()):
            blocks.insert(len(blocks) if mutation != "late" else 0, TextBlock(text="u"))
        return NewMessage(role="user", content=blocks)
    if kind == "user":
        return NewMessage(role="user", content=[TextBlock(text="u")])
    if kind == "assistant":
        blocks = [thinking("t")] if draw(st.booleans()) else []
        if draw(st.booleans()):
            blocks.append(TextBlock(text="a"))
        n = draw(st.integers(0, 3))
        ids = [fresh() for _ in range(n)]
        if n and draw(st.integers(0, 5)) == 0:
            ids.append(ids[0])
        blocks += [ToolUseBlock(id=i, name="bash") for i in ids]
        return NewMessage(role="assistant", content=blocks or [TextBlock(text="a")])
    # odd: blocks in the wrong role
    role = draw(st.sampled_from(["user", "assistant"]))
    block = draw(
        st.sampled_from(
            [thinking("t"), ToolUseBlock(id=fresh(), name="x"), ToolResultBlock(tool_use_id="tu1")]
        )
    )
    return NewMessage(role=role, content=[block])


@st.composite
def _append_sequences(draw: st.DrawFn) -> list[list[NewMessage]]:
    counter = [0]
    batches: list[list[NewMessage]] = []
    last: NewMessage | None = None
    for _ in range(draw(st.integers(1, 8))):
        batch = []
        for _ in range(draw(st.integers(1, 3))):
            asked = (
                [b.id for b in last.content if isinstance(b, ToolUseBlock)]
                if last is not None and last.role == "assistant"
                else []
            )
            last = draw(_message(asked, counter))
            batch.append(last)
        batches.append(batch)
    return batches


def test_the_store_accepts_exactly_the_appends_the_reference_model_accepts(
    tmp_path: Path,
) -> None:
    loop = asyncio.new_event_loop()
    # durability is not what this test is about: skip the fsyncs to afford more examples
    store = loop.run_until_complete(Store.open(str(tmp_path / "p.db"), synchronous="OFF"))
    seen = {"accepted": 0, "refused": 0}

    async def check(batches: list[list[NewMessage]]) -> None:
        tid = (await store.create_thread(kind="worker")).id
        accepted: list[NewMessage] = []
        for batch in batches:
            expected = _reference_accepts(accepted, batch)
            try:
                stored = await store.append(tid, batch)
            except InvariantError:
                assert not expected, f"refused a valid append after {len(accepted)} messages"
                seen["refused"] += 1
                continue
            assert expected, f"accepted an invalid append after {len(accepted)} messages"
            seen["accepted"] += 1
            assert [m.seq for m in stored] == list(
                range(len(accepted) + 1, len(accepted) + len(batch) + 1)
            )
            accepted += batch
        history = await store.messages(tid)
        assert [(m.role, m.content) for m in history] == [(m.role, m.content) for m in accepted]
        assert (await store.get_thread(tid)).head_seq == len(accepted)

    @settings(
        max_examples=100,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(_append_sequences())
    def prop(batches: list[list[NewMessage]]) -> None:
        loop.run_until_complete(check(batches))

    try:
        prop()
    finally:
        loop.run_until_complete(store.close())
        loop.close()
    # the generator exercises both outcomes plenty
    assert seen["accepted"] > 50 and seen["refused"] > 50


async def test_messages_and_threads_can_keep_the_time_they_had_elsewhere(store: Store) -> None:
    """An imported session keeps its times: a thread created at a given time (its id sorts
    there), messages appended with their own (None: the append's), read back as given."""
    then = datetime(2025, 9, 25, 1, 22, 20, 68000, tzinfo=UTC)
    t = await store.create_thread(kind="lead", created_at=then)
    newer = await store.create_thread(kind="lead")
    assert t.created_at == then and t.id < newer.id
    later = then + timedelta(seconds=5)
    out = await store.append(t.id, [user("q"), assistant("a")], times=[later, None])
    stored = await store.messages(t.id)
    assert stored[0].created_at == later == out[0].created_at
    assert stored[1].created_at > then + timedelta(days=365)  # the append's own time
    assert [x.id for x in await store.list_threads(oldest_first=True)][:1] == [t.id]
    with pytest.raises(ValueError, match="1 times for 2 messages"):
        await store.append(t.id, [user("q"), assistant("a")], times=[later])
    assert len(await store.messages(t.id)) == 2
