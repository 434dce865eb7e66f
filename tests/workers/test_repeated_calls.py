"""The same tool call, turn after turn (issue 26: the 0.5B model, constrained to real tools, read
the workspace directory 12 times and never submitted): the third call in a row is answered with a
tool error naming the output the model already has, not run; a fourth stops the thread with one
line naming it. Real SQLite, real tools (``bash`` appends to a file, so what ran is counted on
disk), the FunctionModel double."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from store import Kind, Status, Store, ToolResultBlock, ToolUseBlock, format_ref
from workers import SUBMIT_RESULT, ModelRequest, ModelResponse
from workers._repetition import (
    CALL_REFUSED_AT,
    CALL_STOPPED_AT,
    STOPPED_CALL,
    call_key,
    repeated_calls,
)
from workers.providers import FunctionModel, tool_response

from .test_loop_nudges import assert_pairing_valid, new_thread, run

COUNT = {"command": "echo ran >> ran.txt; echo same output"}


def ran(ws: Path) -> int:
    path = ws / "ran.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


def scripted(turn: Callable[[int, ModelRequest], ModelResponse]) -> FunctionModel:
    calls = 0

    def reply(request: ModelRequest) -> ModelResponse:
        nonlocal calls
        calls += 1
        return turn(calls, request)

    return FunctionModel(reply)


def results(messages: Any) -> list[ToolResultBlock]:
    return [b for m in messages for b in m.content if isinstance(b, ToolResultBlock)]


def test_the_thresholds_tell_once_then_stop() -> None:
    assert (CALL_REFUSED_AT, CALL_STOPPED_AT) == (3, 4)


def test_the_same_input_in_another_key_order_is_the_same_call() -> None:
    a = ToolUseBlock(id="a", name="grep", input={"pattern": "x", "path": "."})
    b = ToolUseBlock(id="b", name="grep", input={"path": ".", "pattern": "x"})
    c = ToolUseBlock(id="c", name="grep", input={"path": ".", "pattern": "y"})
    assert call_key(a) == call_key(b) != call_key(c)


async def test_the_same_call_is_refused_the_third_time_and_stops_the_thread_the_fourth(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    model = scripted(lambda n, _: tool_response(("bash", COUNT)))
    out = await run(store, tid, model, workspace)
    ref = format_ref(tid)
    assert out.status == Status.FAILED
    assert out.error == f"{ref}: the model made the same call (bash) 4 times in a row; stopped"
    assert out.turns == CALL_STOPPED_AT
    assert ran(workspace) == 2  # the third was refused, the fourth stopped the thread
    msgs = await store.messages(tid)
    assert_pairing_valid(msgs)
    answers = results(msgs)
    assert [a.is_error for a in answers] == [False, False, True, True]
    second_output = format_ref(tid, 5)  # task #1, call #2, output #3, call #4, output #5
    assert f"you already have its output at [{second_output}]" in answers[2].text
    assert "3 times in a row" in answers[2].text
    assert answers[3].text == STOPPED_CALL
    info = await store.get_thread(tid)
    assert info.error == out.error
    assert info.result is not None and info.result.status == "failed"


async def test_a_model_told_it_repeats_itself_may_change_course_and_submit(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)

    def turn(n: int, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1].content[0]
        if isinstance(last, ToolResultBlock) and "not run: you made" in last.text:
            return tool_response((SUBMIT_RESULT, {"status": "done", "summary": "same output"}))
        return tool_response(("bash", COUNT))

    out = await run(store, tid, scripted(turn), workspace)
    assert out.status == Status.DONE and out.result is not None
    assert out.result.summary == "same output"
    assert ran(workspace) == 2


async def test_calls_with_another_call_or_a_user_message_between_are_not_repeats(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    other = {"command": "echo other"}

    def turn(n: int, _: ModelRequest) -> ModelResponse:
        if n <= 6:  # the same call every other turn: never in a row
            return tool_response(("bash", COUNT if n % 2 else other))
        return tool_response((SUBMIT_RESULT, {"status": "done", "summary": "ok"}))

    out = await run(store, tid, scripted(turn), workspace)
    assert out.status == Status.DONE and ran(workspace) == 3
    assert not any(b.is_error for b in results(await store.messages(tid)))

    # a person's message between two calls starts the count again (a resume: "run it again")
    tid = await new_thread(store)
    twice = scripted(lambda n, _: tool_response(("bash", COUNT)) if n <= 2 else _submit())
    await run(store, tid, twice, workspace)
    again = scripted(lambda n, _: tool_response(("bash", COUNT)) if n <= 2 else _submit())
    out = await run(store, tid, again, workspace, message="Run it twice more.")
    assert out.status == Status.DONE and ran(workspace) == 3 + 4


def _submit() -> ModelResponse:
    return tool_response((SUBMIT_RESULT, {"status": "done", "summary": "ok"}))


async def test_calls_repeated_together_are_each_refused_and_submit_result_never_counts(
    store: Store, workspace: Path
) -> None:
    tid = await new_thread(store)
    pair = (("bash", COUNT), ("list_files", {"path": "."}))
    model = scripted(lambda n, _: tool_response(*pair))
    out = await run(store, tid, model, workspace)
    assert out.status == Status.FAILED and "4 times in a row" in (out.error or "")
    assert ran(workspace) == 2
    third = results(await store.messages(tid))[4:6]
    assert [b.is_error for b in third] == [True, True]
    assert all(b.text.startswith("not run: you made this same call") for b in third)

    # submit_result has its own bound (invalid submissions), never this one
    tid = await new_thread(store)
    bad = (SUBMIT_RESULT, {"status": "nonsense", "summary": "x"})
    out = await run(store, tid, scripted(lambda n, _: tool_response(bad)), workspace)
    assert out.error == "submit_result kept failing validation; no result"
    msgs = await store.messages(tid)
    assert repeated_calls(msgs[:-1]) == {}  # the last stored turn, submit_result alone


async def test_a_lead_is_held_to_it_too(store: Store, workspace: Path) -> None:
    tid = await new_thread(store, kind=Kind.LEAD, tools=["bash"])
    out = await run(store, tid, scripted(lambda n, _: tool_response(("bash", COUNT))), workspace)
    assert out.status == Status.FAILED and out.error is not None
    assert out.error.endswith("the model made the same call (bash) 4 times in a row; stopped")
