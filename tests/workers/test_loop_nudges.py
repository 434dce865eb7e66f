"""Bounded nudges: a worker turn that ends without ``submit_result`` (plain text or an empty reply)
is answered with a stored nudge, at most ``result_nudges`` times per run, when the model's
provider asks for it; then the worker ends ``partial`` as SPEC says. Real SQLite, real tools, the
FunctionModel double, and the real OpenAI-compatible provider against the loopback fake."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from store import (
    Kind,
    Message,
    NewMessage,
    Status,
    Store,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tests.fakes.chat_api import FakeChatAPI
from workers import (
    SUBMIT_RESULT,
    Limits,
    LoopConfig,
    ModelRequest,
    ModelResponse,
    build_tools,
    run_thread,
)
from workers._nudges import (
    EMPTY_REPLY_SUMMARY,
    NUDGE_EMPTY,
    NUDGE_EMPTY_READER,
    NUDGE_NO_RESULT,
)
from workers._protocol import result_nudges
from workers.providers import FunctionModel, OpenAIChatModel, text_response, tool_response

TOOLS = ["read_file", "list_files", "bash"]
NUDGES = {NUDGE_EMPTY, NUDGE_NO_RESULT, NUDGE_EMPTY_READER}


class NudgedModel(FunctionModel):
    """A FunctionModel whose provider asks for one nudge, as the OpenAI-compatible one does."""

    result_nudges = 1


class ThriceNudgedModel(FunctionModel):
    result_nudges = 3


def empty() -> ModelResponse:
    return ModelResponse(content=[], stop_reason="end_turn", usage=Usage(), model="function")


def submit(summary: str = "fixed it") -> ModelResponse:
    return tool_response((SUBMIT_RESULT, {"status": "done", "summary": summary}))


def replies(*turns: ModelResponse, cls: type[FunctionModel] = NudgedModel) -> FunctionModel:
    """Answers call k with turns[k] (the last one repeated)."""
    calls = 0

    def reply(request: ModelRequest) -> ModelResponse:
        nonlocal calls
        calls += 1
        return turns[min(calls - 1, len(turns) - 1)]

    return cls(reply)


async def new_thread(store: Store, kind: Kind = Kind.WORKER, tools: Sequence[str] = ()) -> str:
    names = [*TOOLS, SUBMIT_RESULT] if kind == Kind.WORKER and not tools else list(tools)
    info = await store.create_thread(
        kind=kind,
        title="t",
        system_prompt="you are a worker",
        tools=names,
        model="function:test",
        status=Status.QUEUED,
        messages=[NewMessage.user("do the task")],
    )
    return info.id


async def run(store: Store, tid: str, model: Any, ws: Path, **kw: Any):  # type: ignore[no-untyped-def]
    return await run_thread(store, tid, model=model, tools=build_tools(TOOLS), workspace=ws, **kw)


def texts(msg: Message) -> str:
    return "\n".join(b.text for b in msg.content if isinstance(b, TextBlock))


def nudges_in(msgs: Sequence[Message]) -> list[str]:
    return [texts(m) for m in msgs if m.role == "user" and texts(m) in NUDGES]


def assert_pairing_valid(msgs: Sequence[Message]) -> None:
    """SPEC invariant 3, and roles alternate: every tool_use answered by exactly one result in
    the next user message; a turn without tool_use is followed by a message without results."""
    assert [m.seq for m in msgs] == list(range(1, len(msgs) + 1))
    for prev, nxt in itertools.pairwise(msgs):
        assert prev.role != nxt.role, (prev.seq, nxt.seq)
        if prev.role != "assistant":
            continue
        uses = [b.id for b in prev.content if isinstance(b, ToolUseBlock)]
        answered = [b.tool_use_id for b in nxt.content if isinstance(b, ToolResultBlock)]
        assert sorted(uses) == sorted(answered), (prev.seq, uses, answered)


# --- the nudge itself -----------------------------------------------------------------------


async def test_an_empty_reply_is_nudged_and_the_worker_then_submits(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    model = replies(empty(), submit())
    outcome = await run(store, tid, model, workspace)
    assert outcome.status == Status.DONE
    assert outcome.result is not None and outcome.result.status == "done"
    assert outcome.result.summary == "fixed it" and outcome.turns == 2
    msgs = await store.messages(tid)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert texts(msgs[1]) == "(empty reply)"
    assert texts(msgs[2]) == NUDGE_EMPTY  # stored, so nothing is hidden from a reader
    # the model was really sent the nudge as the newest user message
    assert model.requests[1].messages[-1].content == [TextBlock(text=NUDGE_EMPTY)]
    assert_pairing_valid(msgs)


async def test_plain_text_twice_ends_partial_with_the_last_text(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    model = replies(text_response("I think the bug is in x.py"), text_response("It is in x.py"))
    outcome = await run(store, tid, model, workspace)
    assert outcome.status == Status.DONE
    assert outcome.result is not None and outcome.result.status == "partial"
    assert outcome.result.summary == "It is in x.py"
    assert outcome.result.turns == 2 and len(model.requests) == 2
    msgs = await store.messages(tid)
    assert nudges_in(msgs) == [NUDGE_NO_RESULT]
    info = await store.get_thread(tid)
    assert info.result is not None and info.result.summary == "It is in x.py"
    assert_pairing_valid(msgs)


async def test_an_empty_reply_after_text_keeps_the_text_as_summary(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    outcome = await run(store, tid, replies(text_response("found it: x.py:3"), empty()), workspace)
    assert outcome.result is not None and outcome.result.status == "partial"
    assert outcome.result.summary == "found it: x.py:3"


async def test_only_empty_replies_end_partial_saying_the_reply_was_empty(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    blank = text_response("  \n ")  # whitespace only is no text either
    outcome = await run(store, tid, replies(blank, empty()), workspace)
    assert outcome.status == Status.DONE
    assert outcome.result is not None and outcome.result.status == "partial"
    assert outcome.result.summary == EMPTY_REPLY_SUMMARY
    assert nudges_in(await store.messages(tid)) == [NUDGE_EMPTY]


async def test_nudges_never_exceed_the_models_count(store: Store, workspace: Path) -> None:
    tid = await new_thread(store)
    calls = 0

    def chatter(request: ModelRequest) -> ModelResponse:
        nonlocal calls
        calls += 1
        return text_response(f"still thinking {calls}")

    model = ThriceNudgedModel(chatter)
    outcome = await run(store, tid, model, workspace)
    assert outcome.result is not None and outcome.result.status == "partial"
    assert outcome.result.summary == "still thinking 4"
    assert calls == 4 and outcome.turns == 4
    msgs = await store.messages(tid)
    assert nudges_in(msgs) == [NUDGE_NO_RESULT] * 3
    assert_pairing_valid(msgs)


async def test_a_nudge_after_tool_work_counts_per_run_not_per_turn(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    model = replies(
        text_response("let me look"),
        tool_response(("list_files", {})),
        text_response("done looking"),
    )
    outcome = await run(store, tid, model, workspace)
    assert outcome.result is not None and outcome.result.status == "partial"
    assert outcome.result.summary == "done looking"
    assert nudges_in(await store.messages(tid)) == [NUDGE_NO_RESULT]


# --- who is not nudged ----------------------------------------------------------------------


async def test_a_model_without_nudges_ends_partial_at_once(store: Store, workspace: Path) -> None:
    tid = await new_thread(store)
    model = replies(text_response("I looked; x.py"), submit(), cls=FunctionModel)
    assert result_nudges(model) == 0
    outcome = await run(store, tid, model, workspace)
    assert outcome.result is not None and outcome.result.status == "partial"
    assert outcome.result.summary == "I looked; x.py" and len(model.requests) == 1
    assert nudges_in(await store.messages(tid)) == []


async def test_the_lead_is_never_nudged(store: Store, workspace: Path) -> None:
    for reply in (text_response("the report"), empty()):
        tid = await new_thread(store, Kind.LEAD, tools=["list_files"])
        model = replies(reply, text_response("second"))
        outcome = await run(store, tid, model, workspace)
        assert outcome.status == Status.DONE and len(model.requests) == 1
        assert nudges_in(await store.messages(tid)) == []
    assert outcome.final_text == "(empty reply)"


async def test_a_reader_is_nudged_only_for_an_empty_reply(store: Store, workspace: Path) -> None:
    tid = await new_thread(store, Kind.READER, tools=["list_files"])
    model = replies(text_response("It failed at T-x#3."), text_response("second"))
    outcome = await run(store, tid, model, workspace)
    assert outcome.final_text == "It failed at T-x#3." and len(model.requests) == 1

    tid = await new_thread(store, Kind.READER, tools=["list_files"])
    model = replies(empty(), text_response("It failed at T-x#3."))
    outcome = await run(store, tid, model, workspace)
    assert outcome.status == Status.DONE and outcome.final_text == "It failed at T-x#3."
    assert nudges_in(await store.messages(tid)) == [NUDGE_EMPTY_READER]


async def test_a_worker_without_submit_result_is_not_nudged(store: Store, workspace: Path) -> None:
    tid = await new_thread(store, Kind.WORKER, tools=["list_files"])
    model = replies(text_response("all done"), submit())
    outcome = await run(store, tid, model, workspace)
    assert outcome.result is not None and outcome.result.status == "partial"
    assert len(model.requests) == 1


# --- limits ---------------------------------------------------------------------------------


async def test_no_nudge_on_the_last_allowed_turn(store: Store, workspace: Path) -> None:
    tid = await new_thread(store)
    model = replies(tool_response(("list_files", {})), text_response("out of turns"), submit())
    outcome = await run(store, tid, model, workspace, config=LoopConfig(limits=Limits(turns=2)))
    # partial, not "max_turns reached": the nudge would have had no turn to be answered in
    assert outcome.status == Status.DONE and outcome.error is None
    assert outcome.result is not None and outcome.result.status == "partial"
    assert len(model.requests) == 2 and nudges_in(await store.messages(tid)) == []


async def test_the_nudged_turn_counts_against_max_turns(store: Store, workspace: Path) -> None:
    tid = await new_thread(store)
    model = replies(empty(), submit())
    outcome = await run(store, tid, model, workspace, config=LoopConfig(limits=Limits(turns=2)))
    assert outcome.status == Status.DONE and outcome.turns == 2
    assert outcome.result is not None and outcome.result.status == "done"


async def test_no_nudge_when_the_threads_token_budget_is_spent(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    costly = text_response("spent", usage=Usage(input_tokens=90, output_tokens=20))
    model = replies(costly, submit())
    outcome = await run(store, tid, model, workspace, config=LoopConfig(limits=Limits(tokens=100)))
    assert outcome.status == Status.DONE
    assert outcome.result is not None and outcome.result.status == "partial"
    assert len(model.requests) == 1


async def test_no_nudge_when_the_jobs_budget_is_spent(store: Store, workspace: Path) -> None:
    tid = await new_thread(store)  # a job of its own: its usage rows are the job's
    costly = text_response("spent", usage=Usage(input_tokens=90, output_tokens=20))
    model = replies(costly, submit())
    outcome = await run(
        store, tid, model, workspace, config=LoopConfig(limits=Limits(job_tokens=100))
    )
    assert outcome.status == Status.DONE
    assert outcome.result is not None and outcome.result.summary == "spent"
    assert len(model.requests) == 1


# --- crash and resume -----------------------------------------------------------------------


async def test_a_run_stopped_while_the_nudge_is_answered_resumes_to_a_result(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    asked = asyncio.Event()

    async def stalls(request: ModelRequest) -> ModelResponse:
        if len(request.messages) == 1:
            return text_response("I found it")
        asked.set()
        await asyncio.Event().wait()  # the process "dies" while the nudge is being answered
        raise AssertionError("unreachable")

    task = asyncio.create_task(run(store, tid, NudgedModel(stalls), workspace))
    waiter = asyncio.create_task(asked.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    assert asked.is_set(), "the run ended without sending the nudge"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    info = await store.get_thread(tid)
    assert info.status == Status.INTERRUPTED
    before = await store.messages(tid)
    assert texts(before[-1]) == NUDGE_NO_RESULT

    outcome = await run(store, tid, replies(submit("resumed")), workspace)
    assert outcome.status == Status.DONE
    assert outcome.result is not None and outcome.result.summary == "resumed"
    after = await store.messages(tid)
    assert after[: len(before)] == before  # append-only: the nudge is answered, not redone
    assert nudges_in(after) == [NUDGE_NO_RESULT]
    assert_pairing_valid(after)


# --- end to end: the OpenAI-compatible provider over HTTP -----------------------------------


@pytest.fixture
def api() -> Iterator[FakeChatAPI]:
    with FakeChatAPI() as server:
        yield server


async def openai_run(store: Store, api: FakeChatAPI, ws: Path):  # type: ignore[no-untyped-def]
    model = OpenAIChatModel("qwen2.5-coder:1.5b", api.base_url, max_retries=0)
    try:
        tid = await new_thread(store)
        return tid, await run(store, tid, model, ws)
    finally:
        await model.aclose()


async def test_openai_compatible_provider_nudges_an_empty_reply_once(
    store: Store, workspace: Path, api: FakeChatAPI
) -> None:
    assert result_nudges(OpenAIChatModel("m", api.base_url)) == 1
    api.respond_with(
        [
            {"content": ""},
            {
                "content": None,
                "tool_calls": [
                    {
                        "name": SUBMIT_RESULT,
                        "arguments": {"status": "done", "summary": "fixed over http"},
                    }
                ],
            },
        ]
    )
    tid, outcome = await openai_run(store, api, workspace)
    assert outcome.status == Status.DONE
    assert outcome.result is not None and outcome.result.summary == "fixed over http"
    assert api.rejections == []  # the fake checks pairing the way real servers do
    sent = api.chat_requests[1]["messages"]
    assert sent[-2] == {"role": "assistant", "content": "(empty reply)"}
    assert sent[-1] == {"role": "user", "content": NUDGE_EMPTY}
    assert_pairing_valid(await store.messages(tid))


async def test_openai_compatible_provider_ends_partial_after_one_nudge(
    store: Store, workspace: Path, api: FakeChatAPI
) -> None:
    api.respond_with([{"content": "It is x.py"}, {"content": "Really, x.py"}, {"content": "3rd"}])
    tid, outcome = await openai_run(store, api, workspace)
    assert_pairing_valid(await store.messages(tid))
    assert outcome.result is not None and outcome.result.status == "partial"
    assert outcome.result.summary == "Really, x.py"
    assert len(api.chat_requests) == 2 and api.rejections == []
    assert api.chat_requests[1]["messages"][-1] == {"role": "user", "content": NUDGE_NO_RESULT}
