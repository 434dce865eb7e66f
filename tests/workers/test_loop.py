"""The agent loop over a real SQLite store, real tools and a function-backed model double."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from store import (
    Kind,
    LeaseHeld,
    LeaseLost,
    NewMessage,
    Status,
    Store,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tests.fakes.messages_api import FakeMessagesAPI
from workers import (
    INTERRUPTED_RESULT,
    SUBMIT_RESULT,
    Limits,
    LoopConfig,
    ModelRequest,
    ModelResponse,
    ProviderUnavailable,
    build_tools,
    run_thread,
)
from workers.providers import AnthropicModel, FunctionModel, text_response, tool_response

TOOLS = ["read_file", "write_file", "edit_file", "list_files", "grep", "bash"]


async def new_worker(store: Store, prompt: str = "do the task") -> str:
    info = await store.create_thread(
        kind=Kind.WORKER,
        title="t",
        system_prompt="you are a worker",
        tools=[*TOOLS, SUBMIT_RESULT],
        model="function:test",
        status=Status.QUEUED,
        messages=[NewMessage.user(prompt)],
    )
    return info.id


def scripted(*turns: ModelResponse) -> FunctionModel:
    """Answers turn k with turns[k] where k counts the assistant messages so far."""

    def reply(request: ModelRequest) -> ModelResponse:
        k = sum(1 for m in request.messages if m.role == "assistant")
        return turns[min(k, len(turns) - 1)]

    return FunctionModel(reply)


def submit(**extra: object) -> ModelResponse:
    payload = {"status": "done", "summary": "fixed it"} | extra
    return tool_response((SUBMIT_RESULT, payload))


async def run(store: Store, tid: str, model: FunctionModel, ws: Path, **kw: object):  # type: ignore[no-untyped-def]
    return await run_thread(
        store,
        tid,
        model=model,
        tools=build_tools(TOOLS),
        workspace=ws,
        **kw,  # type: ignore[arg-type]
    )


async def test_worker_runs_tools_then_submits_and_every_step_is_stored(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    model = scripted(
        tool_response(
            ("bash", {"command": "echo hello"}), usage=Usage(input_tokens=10, output_tokens=3)
        ),
        submit(findings=[{"claim": "echo works", "evidence": [f"T-{tid}#3"]}]),
    )
    outcome = await run(store, tid, model, workspace)
    assert outcome.status == Status.DONE
    assert outcome.turns == 2
    info = await store.get_thread(tid)
    assert info.status == Status.DONE and info.lease_owner is None
    assert info.result is not None
    assert info.result.summary == "fixed it"
    assert info.result.findings[0].evidence == [f"T-{tid}#3"]
    assert info.result.turns == 2 and info.result.duration_s is not None
    msgs = await store.messages(tid)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    result_block = msgs[2].content[0]
    assert isinstance(result_block, ToolResultBlock) and "hello" in result_block.text
    assert (await store.usage.of_thread(tid)).input_tokens == 10


async def test_plain_text_ending_becomes_a_partial_result(store: Store, workspace: Path) -> None:
    tid = await new_worker(store)
    outcome = await run(
        store, tid, scripted(text_response("I looked; the bug is in x.py")), workspace
    )
    assert outcome.status == Status.DONE
    assert outcome.result is not None
    assert outcome.result.status == "partial"
    assert outcome.result.summary == "I looked; the bug is in x.py"


async def test_invalid_submission_goes_back_to_the_model_to_correct(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    model = scripted(
        tool_response((SUBMIT_RESULT, {"status": "great", "summary": "x"})),
        submit(),
    )
    outcome = await run(store, tid, model, workspace)
    assert outcome.status == Status.DONE and outcome.result is not None
    msgs = await store.messages(tid)
    first_answer = msgs[2].content[0]
    assert isinstance(first_answer, ToolResultBlock) and first_answer.is_error
    assert "status" in first_answer.text


async def test_submissions_that_keep_failing_validation_fail_the_thread(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    model = scripted(tool_response((SUBMIT_RESULT, {"summary": "no status"})))
    outcome = await run(store, tid, model, workspace, config=LoopConfig(max_invalid_submissions=2))
    assert outcome.status == Status.FAILED
    assert "validation" in (outcome.error or "")


async def test_evidence_that_does_not_resolve_is_dropped_and_counted(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    other = await new_worker(store)
    model = scripted(
        submit(
            findings=[
                {
                    "claim": "c",
                    "evidence": [f"T-{tid}#1", f"T-{tid}#99", f"T-{other}#1", "nonsense"],
                }
            ]
        )
    )
    outcome = await run(store, tid, model, workspace)
    assert outcome.result is not None
    assert outcome.result.findings[0].evidence == [f"T-{tid}#1"]
    assert outcome.result.dropped_evidence == 3


async def test_evidence_by_the_end_of_the_id_is_kept_as_a_whole_ref(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    end, start = f"T-…{tid[-8:]}#1", f"T-{tid[-8:]}#1"  # the end, and the end taken as a start
    outcome = await run(
        store, tid, scripted(submit(findings=[{"claim": "c", "evidence": [end, start]}])), workspace
    )
    assert outcome.result is not None
    assert outcome.result.findings[0].evidence == [f"T-{tid}#1"]
    assert outcome.result.dropped_evidence == 1


async def test_a_tool_call_cut_off_by_max_tokens_is_never_run(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    cut = ModelResponse(
        content=[
            ToolUseBlock(
                id="toolu_cut", name="write_file", input={"path": "x.txt", "content": "par"}
            )
        ],
        stop_reason="max_tokens",
        usage=Usage(),
        model="m",
    )
    outcome = await run(store, tid, scripted(cut, submit()), workspace)
    assert outcome.status == Status.DONE
    assert not (workspace / "x.txt").exists()
    answer = (await store.messages(tid))[2].content[0]
    assert isinstance(answer, ToolResultBlock) and answer.is_error and "NOT run" in answer.text


async def test_a_text_reply_cut_off_is_continued_not_accepted(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    cut = text_response("The root cause is", stop_reason="max_tokens")
    outcome = await run(store, tid, scripted(cut, text_response("the tokenizer.")), workspace)
    assert outcome.result is not None and outcome.result.summary == "the tokenizer."
    msgs = await store.messages(tid)
    assert msgs[2].role == "user" and "cut off" in msgs[2].text


async def test_a_refusal_fails_the_thread_saying_so(store: Store, workspace: Path) -> None:
    tid = await new_worker(store)
    outcome = await run(store, tid, scripted(text_response("no", stop_reason="refusal")), workspace)
    assert outcome.status == Status.FAILED and "refused" in (outcome.error or "")


async def test_provider_failure_fails_the_thread_with_the_error(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)

    def broken(request: ModelRequest) -> ModelResponse:
        raise ProviderUnavailable("overloaded after 5 attempts", attempts=5)

    outcome = await run(store, tid, FunctionModel(broken), workspace)
    assert outcome.status == Status.FAILED
    assert isinstance(outcome.exception, ProviderUnavailable)
    assert (
        await store.get_thread(tid)
    ).error == "model provider failed: overloaded after 5 attempts"


async def test_max_turns_stops_the_thread(store: Store, workspace: Path) -> None:
    tid = await new_worker(store)
    model = scripted(tool_response(("list_files", {})))
    outcome = await run(store, tid, model, workspace, config=LoopConfig(limits=Limits(turns=3)))
    assert outcome.status == Status.FAILED and outcome.turns == 3
    msgs = await store.messages(tid)
    assert msgs[-1].role == "user"  # the last tool call was answered


async def test_parallel_tool_calls_of_one_turn_run_concurrently(
    store: Store, workspace: Path
) -> None:
    # each command waits for the other's file: they only finish if they run at the same time
    a = "touch a.flag; for i in $(seq 100); do [ -f b.flag ] && exit 0; sleep 0.05; done; exit 7"
    b = "touch b.flag; for i in $(seq 100); do [ -f a.flag ] && exit 0; sleep 0.05; done; exit 7"
    tid = await new_worker(store)
    model = scripted(tool_response(("bash", {"command": a}), ("bash", {"command": b})), submit())
    await run(store, tid, model, workspace)
    results = (await store.messages(tid))[2].content
    assert all(isinstance(r, ToolResultBlock) and "exit code: 0" in r.text for r in results)


async def test_tool_outputs_are_stored_whole_and_capped_for_the_model(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    model = scripted(
        tool_response(("bash", {"command": "head -c 100000 /dev/zero | tr '\\0' a"})), submit()
    )
    await run(store, tid, model, workspace, config=LoopConfig(output_cap=5000))
    stored = (await store.messages(tid))[2].content[0]
    assert isinstance(stored, ToolResultBlock) and stored.text.count("a") >= 100000
    seen = model.requests[1].messages[2].content[0]
    assert isinstance(seen, ToolResultBlock)
    assert len(seen.text) < 6000
    assert f"T-{tid}#3" in seen.text and "characters omitted" in seen.text


async def test_cancellation_leaves_the_thread_interrupted_with_in_flight_calls_answered(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    started = workspace / "started"
    model = scripted(tool_response(("bash", {"command": f"echo $$ > {started}; sleep 60"})))
    task = asyncio.create_task(run(store, tid, model, workspace))
    while not started.exists() or not started.read_text().strip():
        await asyncio.sleep(0.02)
    pid = int(started.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    info = await store.get_thread(tid)
    assert info.status == Status.INTERRUPTED and info.lease_owner is None
    last = (await store.messages(tid))[-1].content[0]
    assert isinstance(last, ToolResultBlock) and last.text == INTERRUPTED_RESULT
    # killed: gone, or a zombie for the moment it takes init to reap it (the shell's parent,
    # the exec helper, was killed in the same group)
    assert await _killed(pid)


async def _killed(pid: int, within_s: float = 5.0) -> bool:
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
            return True
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)


async def test_resume_answers_an_orphaned_tool_call_and_never_reruns_it(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    # a crashed run: the assistant turn was stored, its tool never answered
    await store.append(
        tid,
        NewMessage(
            role="assistant",
            content=[
                ToolUseBlock(id="toolu_1", name="write_file", input={"path": "x", "content": "1"})
            ],
        ),
    )
    outcome = await run(store, tid, scripted(submit(), submit()), workspace)
    assert outcome.status == Status.DONE
    assert not (workspace / "x").exists()
    msgs = await store.messages(tid)
    answers = [
        b
        for m in msgs
        for b in m.content
        if isinstance(b, ToolResultBlock) and b.tool_use_id == "toolu_1"
    ]
    assert len(answers) == 1 and answers[0].text == INTERRUPTED_RESULT


async def test_a_thread_run_by_another_live_runner_is_refused(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    await store.leases.acquire(tid, f"otherhost:{os.getpid()}:x", ttl_s=60)
    with pytest.raises(LeaseHeld):
        await run(store, tid, scripted(submit()), workspace)


async def test_a_lease_left_by_a_dead_runner_of_this_host_is_taken_over(
    store: Store, workspace: Path
) -> None:
    import socket
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    tid = await new_worker(store)
    await store.leases.acquire(tid, f"{socket.gethostname()}:{proc.pid}:dead", ttl_s=600)
    outcome = await run(store, tid, scripted(submit()), workspace)
    assert outcome.status == Status.DONE


MARKER = b',"cache_control":{"type":"ephemeral"}'
"""A cache breakpoint as the SDK serializes it. Its quotes are bare, so these bytes cannot occur
inside a JSON string (where a quote is escaped): every occurrence is a marker."""


def _members(raw: bytes, span: tuple[int, int] | None = None) -> list[tuple[int, int]]:
    """The byte spans of the members of the JSON object or array at ``span`` of ``raw`` (the
    whole body by default), in the order they were sent: an object's values, an array's elements.
    Whitespace and key order are whatever the sender wrote; nothing is re-serialized."""
    text = raw.decode()  # strict: a body that is not UTF-8 fails here
    start, end = (0, len(raw)) if span is None else span
    # byte offsets -> str offsets; UTF-8 prefix lengths map them one to one
    at = len(raw[:start].decode())
    stop = len(raw[:end].decode())
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    at = skip(at)
    opener = text[at]
    assert opener in "{[", text[at : at + 40]
    closer = "}" if opener == "{" else "]"
    spans = []
    i = skip(at + 1)
    while text[i] != closer:
        if opener == "{":
            _, i = decoder.raw_decode(text, i)  # the key
            i = skip(i)
            assert text[i] == ":"
            i = skip(i + 1)
        _, value_end = decoder.raw_decode(text, i)
        spans.append((len(text[:i].encode()), len(text[:value_end].encode())))
        i = skip(value_end)
        if text[i] == ",":
            i = skip(i + 1)
    assert i + 1 == stop, "the span is not one JSON value"
    return spans


def _keys(raw: bytes) -> list[str]:
    return list(json.loads(raw))  # json keeps the order the keys were sent in


def assert_rebuilt_prefix(
    original: bytes, rebuilt: bytes, *, messages: int, moved_marker: int
) -> None:
    """``rebuilt`` (the raw body of a resumed or forked thread's request) begins with exactly the
    bytes of ``original`` (an earlier request of the same history) through its first
    ``messages`` messages, and sends every other top-level key (model, system, tools) byte for
    byte as ``original`` did, in the same key order.

    The one difference allowed is the one the provider makes by design: the conversation's cache
    breakpoints roll forward (the message before the newest assistant turn, and the newest
    message), so ``original``'s marker on message ``moved_marker`` is not sent again. Anthropic's
    cache is keyed by the content up to a breakpoint, not by where earlier markers sat, so this
    does not change what is read from the cache; any other byte that differs would."""
    ours, theirs = _members(original), _members(rebuilt)
    assert _keys(original) == _keys(rebuilt)
    keys = _keys(original)
    for key, (a, b) in zip(keys, zip(ours, theirs, strict=True), strict=True):
        if key != "messages":
            assert rebuilt[b[0] : b[1]] == original[a[0] : a[1]], f"{key} differs on the wire"
    index = keys.index("messages")
    (a_start, a_end), (b_start, b_end) = ours[index], theirs[index]
    # and every byte around the values (braces, keys, separators, whitespace)
    assert rebuilt[:b_start] == original[:a_start], "the body differs before messages"
    assert rebuilt[b_end:] == original[a_end:], "the body differs after messages"
    sent_before = _members(original, ours[index])
    sent_again = _members(rebuilt, theirs[index])
    assert len(sent_before) >= messages and len(sent_again) > messages
    start, end = sent_before[moved_marker]
    assert original[start:end].count(MARKER) == 1, "no breakpoint where the test expects one"
    expected = (
        original[:start]
        + original[start:end].replace(MARKER, b"")
        + original[end : sent_before[messages - 1][1]]
    )
    got = rebuilt[: sent_again[messages - 1][1]]
    assert got == expected, _first_difference(got, expected)


def _first_difference(got: bytes, expected: bytes) -> str:
    pairs = zip(got, expected, strict=False)
    at = next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(got), len(expected)))
    near = slice(max(at - 40, 0), at + 40)
    return f"first difference at byte {at}: {got[near]!r} != {expected[near]!r}"


async def test_resume_and_fork_rebuild_a_byte_identical_request_prefix(
    store: Store, workspace: Path
) -> None:
    """Through the real Anthropic SDK, the bytes the loopback Messages API receives: a resumed
    and a forked thread resend the original request's stable prefix byte for byte, so the
    prompt cache reads it."""
    turns = [
        {"content": [{"type": "tool_use", "name": "list_files", "input": {}}]},
        {"content": "done"},
        {"content": "again"},
    ]

    def reply(request: dict[str, Any]) -> dict[str, Any]:
        k = sum(1 for m in request["messages"] if m["role"] == "assistant")
        return turns[min(k, len(turns) - 1)]

    tid = await new_worker(store)
    with FakeMessagesAPI() as api:
        api.respond_with(reply)
        model = AnthropicModel("claude-sonnet-4-5", api_key="sk-test", base_url=api.base_url)
        try:
            await run(store, tid, model, workspace)  # type: ignore[arg-type]
            first = len(api.message_bodies) - 1  # messages 1-3: prompt, tool call, its result
            await run(store, tid, model, workspace, message="one more thing")  # type: ignore[arg-type]
            resumed = len(api.message_bodies) - 1  # 1-3, "done", "one more thing"
            fork = await store.fork(tid, at=3, messages=[NewMessage.user("try another way")])
            await run(store, fork.id, model, workspace)  # type: ignore[arg-type]
            forked = len(api.message_bodies) - 1  # 1-3, "try another way"
        finally:
            await model.aclose()
    assert not api.rejections and (first, resumed, forked) == (1, 2, 3)
    bodies = api.message_bodies
    # resumed: the original's last request is its prefix; the breakpoint on message 3 (the
    # original's newest) is repeated, the one on message 1 has rolled off
    assert_rebuilt_prefix(bodies[first], bodies[resumed], messages=3, moved_marker=0)
    # forked at 3: message 1 keeps its breakpoint (before the newest assistant turn), message 3
    # is no longer the newest
    assert_rebuilt_prefix(bodies[first], bodies[forked], messages=3, moved_marker=2)
    # and the cache says so: the resumed request reads all that the original sent; the fork,
    # all up to its breakpoint on message 1, which the run's opening request (0) wrote
    usage = api.usages
    sent = usage[first]["cache_read_input_tokens"] + usage[first]["cache_creation_input_tokens"]
    assert usage[resumed]["cache_read_input_tokens"] == sent
    assert usage[forked]["cache_read_input_tokens"] == usage[0]["cache_creation_input_tokens"] > 0


async def test_thread_timeout_fails_it_and_answers_the_running_call(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    model = scripted(tool_response(("bash", {"command": "sleep 30"})))
    outcome = await run(store, tid, model, workspace, config=LoopConfig(limits=Limits(time_s=1.0)))
    assert outcome.status == Status.FAILED and "timed out" in (outcome.error or "")
    last = (await store.messages(tid))[-1]
    assert last.role == "user" and isinstance(last.content[0], ToolResultBlock)


async def test_empty_text_blocks_are_never_stored(store: Store, workspace: Path) -> None:
    tid = await new_worker(store)
    reply = ModelResponse(
        content=[TextBlock(text="  "), ToolUseBlock(id="t1", name="list_files", input={})],
        stop_reason="tool_use",
        usage=Usage(),
        model="m",
    )
    await run(store, tid, scripted(reply, submit()), workspace)
    assistant = (await store.messages(tid))[1]
    assert [b.type for b in assistant.content] == ["tool_use"]


async def test_a_run_cancelled_at_any_early_step_never_leaves_its_lease_or_a_running_status(
    store: Store, workspace: Path
) -> None:
    # sweep the cancellation point across the start of a run: leasing, RUNNING, the first call
    for steps in range(0, 60, 3):
        tid = await new_worker(store)
        task = asyncio.create_task(run(store, tid, scripted(submit()), workspace))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        info = await store.get_thread(tid)
        assert info.lease_owner is None, steps
        assert info.status in (Status.QUEUED, Status.INTERRUPTED, Status.DONE), (steps, info.status)
        # and it can be run again at once
        outcome = await run(store, tid, scripted(submit()), workspace)
        assert outcome.status == Status.DONE, steps


async def test_a_run_cancelled_while_its_lease_is_being_written_releases_it(
    store: Store, workspace: Path
) -> None:
    tid = await new_worker(store)
    task = asyncio.create_task(run(store, tid, scripted(submit()), workspace))
    # the run's first write is its lease: cancel exactly while that write is in flight
    while not store._writer.lock.locked():
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    info = await store.get_thread(tid)
    assert info.lease_owner is None
    outcome = await run(store, tid, scripted(submit()), workspace)
    assert outcome.status == Status.DONE


async def test_a_second_cancellation_a_few_steps_after_the_first_still_ends_interrupted(
    store: Store, workspace: Path
) -> None:
    # issue 9 item 13: the cleanup of the first cancellation (answering in-flight calls, writing
    # the terminal status) was itself cancelled by the second one: the thread stayed RUNNING, or
    # the calls were answered twice (InvariantError instead of CancelledError)
    started = workspace / "started"
    model = scripted(
        tool_response(("bash", {"command": f"touch {started}; sleep 60"}), ("list_files", {})),
        submit(),
    )
    for gap in range(0, 40):
        started.unlink(missing_ok=True)
        tid = await new_worker(store)
        task = asyncio.create_task(run(store, tid, model, workspace))
        while not started.exists():
            await asyncio.sleep(0.01)
        task.cancel()
        for _ in range(gap):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        info = await store.get_thread(tid)
        assert info.lease_owner is None, gap
        assert info.status == Status.INTERRUPTED, (gap, info.status)
        msgs = await store.messages(tid)
        uses = [b.id for m in msgs for b in m.content if isinstance(b, ToolUseBlock)]
        answers = [b.tool_use_id for m in msgs for b in m.content if isinstance(b, ToolResultBlock)]
        assert len(uses) == 2 and sorted(uses) == sorted(answers), gap


async def test_a_tool_call_longer_than_the_lease_keeps_it_renewed_and_the_run_ends_done(
    store: Store, workspace: Path
) -> None:
    """A run whose one tool call lasts three of its lease's lifetimes: the lease is renewed in
    the background meanwhile (every third of the TTL), so no one may take the thread over, the
    result is stored and the run ends done, its lease given back. (MCP's long-worker test ran
    a 70 s worker past the default 60 s TTL and so covered this; it now runs 6 s.)"""
    tid = await new_worker(store)
    started = workspace / "started"
    model = scripted(tool_response(("bash", {"command": f"touch {started}; sleep 3"})), submit())
    task = asyncio.create_task(
        run(store, tid, model, workspace, owner="A", config=LoopConfig(lease_ttl_s=1.0))
    )
    while not started.exists():
        await asyncio.sleep(0.01)
    await asyncio.sleep(1.5)  # past the TTL the lease was first taken with
    with pytest.raises(LeaseHeld):
        await store.leases.acquire(tid, "B", ttl_s=60)  # still A's: it was renewed
    outcome = await task
    assert outcome.status == Status.DONE
    info = await store.get_thread(tid)
    assert info.status == Status.DONE and info.lease_owner is None
    answers = [
        b for m in await store.messages(tid) for b in m.content if isinstance(b, ToolResultBlock)
    ]
    assert not answers[0].is_error and "[exit code: 0]" in answers[0].text  # the whole sleep


async def _two_runners(store: Store, workspace: Path, *, ttl: float, release: bool) -> None:
    # issue 9 item 12: runner A is mid-tool when runner B takes its lease over; A must write
    # nothing after that (no tool result, no status) and B carries the thread on
    tid = await new_worker(store)
    started, go = workspace / "started", workspace / "go"
    wait = f"touch {started}; while [ ! -e {go} ]; do sleep 0.02; done; echo A-ran"
    model = scripted(tool_response(("bash", {"command": wait})), submit())
    a = asyncio.create_task(
        run(store, tid, model, workspace, owner="A", config=LoopConfig(lease_ttl_s=ttl))
    )
    while not started.exists():
        await asyncio.sleep(0.01)
    before = await store.messages(tid)
    await store.leases.acquire(tid, "B", ttl_s=60, replace="A")
    if release:
        go.touch()  # A's tool ends now and A tries to store its result
    with pytest.raises(LeaseLost):
        await a
    go.touch()
    assert await store.messages(tid) == before  # nothing of A's after the takeover
    assert (await store.get_thread(tid)).status == Status.RUNNING  # A wrote no status either
    outcome = await run(store, tid, model, workspace, owner="B")
    assert outcome.status == Status.DONE
    msgs = await store.messages(tid)
    uses = [b.id for m in msgs for b in m.content if isinstance(b, ToolUseBlock)]
    answers = [b for m in msgs for b in m.content if isinstance(b, ToolResultBlock)]
    assert sorted(uses) == sorted(b.tool_use_id for b in answers)
    assert answers[0].text == INTERRUPTED_RESULT  # B answered A's call; A's output never landed
    assert not any("A-ran" in b.text for b in answers)


async def test_a_runner_whose_lease_was_taken_over_stops_before_its_next_append(
    store: Store, workspace: Path
) -> None:
    await _two_runners(store, workspace, ttl=3600, release=True)


async def test_a_runner_whose_lease_cannot_be_renewed_stops_at_once(
    store: Store, workspace: Path
) -> None:
    await _two_runners(store, workspace, ttl=0.3, release=False)
