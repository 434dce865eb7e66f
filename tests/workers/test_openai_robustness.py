"""What real OpenAI-compatible servers (llama-server, vLLM, Ollama, OpenAI) send that the API
reference does not promise (issue 10 item 17): tool-call ids missing or repeated, arguments that
are not JSON, finish_reason variants, usage missing or with cache fields, empty replies. Over real
HTTP against the loopback FakeChatAPI, through the real loop where the loop's handling matters."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from store import (
    Message,
    NewMessage,
    Status,
    Store,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tests.fakes.chat_api import FakeChatAPI
from workers import SUBMIT_RESULT, build_tools, run_thread
from workers._protocol import ModelRequest, ToolSpec
from workers.providers import OpenAIChatModel

TOOLS = [
    ToolSpec(
        "read_file",
        "Read a file.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
]
SUBMIT = {"name": SUBMIT_RESULT, "arguments": {"status": "done", "summary": "done"}}


@pytest.fixture
async def model(api: FakeChatAPI) -> AsyncIterator[OpenAIChatModel]:
    m = OpenAIChatModel("llama", api.base_url, max_retries=0)
    yield m
    await m.aclose()


def req(*messages: NewMessage) -> ModelRequest:
    return ModelRequest(system="s", tools=TOOLS, messages=list(messages) or [NewMessage.user("go")])


def uses(content: Sequence[Any]) -> list[ToolUseBlock]:
    return [b for b in content if isinstance(b, ToolUseBlock)]


def read(path: str, call_id: Any = "keep") -> dict[str, Any]:
    call: dict[str, Any] = {"name": "read_file", "arguments": {"path": path}}
    if call_id != "keep":
        call["id"] = call_id
    return call


async def run_worker(
    store: Store, model: OpenAIChatModel, workspace: Path
) -> tuple[str, Status, list[Message]]:
    info = await store.create_thread(
        kind="worker",
        title="t",
        system_prompt="you are a worker",
        tools=["read_file", SUBMIT_RESULT],
        model=model.spec,
        status=Status.QUEUED,
        messages=[NewMessage.user("read the files")],
    )
    outcome = await run_thread(
        store, info.id, model=model, tools=build_tools(["read_file"]), workspace=workspace
    )
    return info.id, outcome.status, list(await store.messages(info.id))


def assert_paired(messages: Sequence[Message]) -> None:
    for prev, nxt in itertools.pairwise(messages):
        if prev.role == "assistant":
            answered = [b.tool_use_id for b in nxt.content if isinstance(b, ToolResultBlock)]
            assert sorted(u.id for u in uses(prev.content)) == sorted(answered)


# --- tool-call ids ------------------------------------------------------------------------------


async def test_missing_empty_odd_and_repeated_ids_become_fresh_unique_ids(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    api.respond_with(
        [
            {
                "tool_calls": [
                    read("a", None),  # no id at all
                    read("b", ""),
                    read("c", "call_0"),
                    read("d", "call_0"),  # repeated in the same reply
                    read("e", "functions.read_file:0"),  # not a portable id
                    read("f", "call_kept"),
                ]
            }
        ]
    )
    history = [
        NewMessage.user("go"),
        NewMessage(role="assistant", content=[ToolUseBlock(id="call_old", name="read_file")]),
        NewMessage(role="user", content=[ToolResultBlock(tool_use_id="call_old", content="x")]),
    ]
    reply = await model.complete(req(*history))
    ids = [u.id for u in uses(reply.content)]
    assert [u.input["path"] for u in uses(reply.content)] == list("abcdef")
    assert len(set(ids)) == 6 and "call_old" not in ids
    assert ids[2] == "call_0" and ids[3] != "call_0" and ids[5] == "call_kept"
    assert all(i.startswith("call_") and len(i) <= 64 for i in ids)


async def test_an_id_reused_from_an_earlier_turn_is_replaced(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    api.respond_with([{"tool_calls": [read("a", "0")]}])
    history = [
        NewMessage.user("go"),
        NewMessage(role="assistant", content=[ToolUseBlock(id="0", name="read_file")]),
        NewMessage(role="user", content=[ToolResultBlock(tool_use_id="0", content="x")]),
    ]
    [use] = uses((await model.complete(req(*history))).content)
    assert use.id != "0"


async def test_a_server_numbering_calls_per_reply_still_pairs_every_result(
    api: FakeChatAPI, model: OpenAIChatModel, store: Store, workspace: Path
) -> None:
    # as some servers do: ids "0", "1" … in every reply, and the same id twice in one
    (workspace / "a.txt").write_text("A")
    (workspace / "b.txt").write_text("B")
    api.respond_with(
        [
            {"tool_calls": [read("a.txt", "0"), read("b.txt", "0")]},
            {"tool_calls": [read("a.txt", "0")]},
            {"tool_calls": [{**SUBMIT, "id": "0"}]},
        ]
    )
    _, status, messages = await run_worker(store, model, workspace)
    assert status == Status.DONE
    assert api.rejections == []  # every request the loop sent paired up on the wire
    assert_paired(messages)
    all_ids = [u.id for m in messages for u in uses(m.content)]
    assert len(all_ids) == 4 and len(set(all_ids)) == 4
    # the ids stored are the ids sent back: the transcript and the wire agree
    wire = api.chat_requests[2]["messages"]
    sent_calls = [
        c["id"] for m in wire if m["role"] == "assistant" for c in m.get("tool_calls", [])
    ]
    sent_results = [m["tool_call_id"] for m in wire if m["role"] == "tool"]
    assert sent_calls == sent_results == all_ids[:3]


# --- arguments that are not JSON -----------------------------------------------------------------


async def test_arguments_that_are_not_json_are_refused_to_the_model_which_then_recovers(
    api: FakeChatAPI, model: OpenAIChatModel, store: Store, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("A")
    api.respond_with(
        [
            {"tool_calls": [{"name": "read_file", "arguments": '{"path": "a.txt"'}]},
            {"tool_calls": [read("a.txt")]},
            {"tool_calls": [SUBMIT]},
        ]
    )
    _, status, messages = await run_worker(store, model, workspace)
    assert status == Status.DONE
    [bad] = uses(messages[1].content)
    assert bad.input == {"_raw_arguments": '{"path": "a.txt"'}
    [refusal] = messages[2].content
    assert isinstance(refusal, ToolResultBlock) and refusal.is_error
    assert "not valid JSON" in refusal.text and '{"path": "a.txt"' in refusal.text
    told = api.chat_requests[1]["messages"][-1]
    assert told["role"] == "tool" and told["content"].startswith("Error: ")
    assert "read_file: the arguments were not valid JSON" in told["content"]
    # sent back as a JSON object holding the raw text: servers that parse the history's
    # arguments (llama.cpp's templates do) accept it, and the model still sees what it wrote
    assert api.chat_requests[1]["messages"][-2]["tool_calls"][0]["function"]["arguments"] == (
        json.dumps({"_raw_arguments": '{"path": "a.txt"'})
    )


@pytest.mark.parametrize("raw", ["[1, 2]", '"a string"', "null", "   "])
async def test_arguments_that_are_json_but_not_an_object(
    api: FakeChatAPI, model: OpenAIChatModel, raw: str
) -> None:
    api.respond_with([{"tool_calls": [{"name": "read_file", "arguments": raw, "id": "c1"}]}])
    [use] = uses((await model.complete(req())).content)
    assert use.input == ({} if not raw.strip() or raw == "null" else {"_raw_arguments": raw})


# --- finish_reason --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finish", "with_calls", "expected"),
    [
        ("length", True, "max_tokens"),  # cut mid-call: the loop answers the calls as cut off
        ("length", False, "max_tokens"),
        ("max_tokens", False, "max_tokens"),
        ("tool_calls", False, "end_turn"),  # says tool_calls, sends none
        ("function_call", True, "tool_use"),
        ("stop", True, "tool_use"),
        (None, True, "tool_use"),
        (None, False, "end_turn"),
        ("eos", False, "end_turn"),
        ("something_new", True, "tool_use"),
        ("something_new", False, "end_turn"),
        ("content_filter", False, "refusal"),
    ],
)
async def test_finish_reason_variants(
    api: FakeChatAPI, model: OpenAIChatModel, finish: str | None, with_calls: bool, expected: str
) -> None:
    spec: dict[str, Any] = {"content": "x", "finish_reason": finish}
    if with_calls:
        spec["tool_calls"] = [read("a")]
    api.respond_with([spec])
    reply = await model.complete(req())
    assert reply.stop_reason == expected
    assert len(uses(reply.content)) == int(with_calls)


async def test_a_missing_finish_reason_and_missing_usage(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    api.inject("body", body={"choices": [{"message": {"role": "assistant", "content": "hi"}}]})
    reply = await model.complete(req())
    assert reply.content == [TextBlock(text="hi")] and reply.stop_reason == "end_turn"
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens == 1  # estimated


# --- usage --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {
                "prompt_tokens": 1000,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 800},
            },
            Usage(input_tokens=200, output_tokens=7, cache_read_input_tokens=800),
        ),
        (
            {"prompt_tokens": 1000, "completion_tokens": 7, "cache_read_input_tokens": 600},
            Usage(input_tokens=400, output_tokens=7, cache_read_input_tokens=600),
        ),
        (
            {
                "prompt_tokens": 1000,
                "completion_tokens": 7,
                "prompt_cache_hit_tokens": 900,
                "prompt_cache_miss_tokens": 100,
            },
            Usage(input_tokens=100, output_tokens=7, cache_read_input_tokens=900),
        ),
        (
            {
                "prompt_tokens": 1000,
                "completion_tokens": 7,
                "cache_read_input_tokens": 500,
                "cache_creation_input_tokens": 300,
            },
            Usage(
                input_tokens=200,
                output_tokens=7,
                cache_read_input_tokens=500,
                cache_creation_input_tokens=300,
            ),
        ),
        (
            {
                "prompt_tokens": 10,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 50},
            },
            Usage(input_tokens=0, output_tokens=7, cache_read_input_tokens=10),
        ),
        (
            {"prompt_tokens": 10, "completion_tokens": 7, "prompt_tokens_details": None},
            Usage(input_tokens=10, output_tokens=7),
        ),
    ],
    ids=["openai-details", "cache-read-field", "deepseek", "cache-write", "capped", "null-details"],
)
async def test_usage_with_cache_fields(
    api: FakeChatAPI, model: OpenAIChatModel, usage: dict[str, Any], expected: Usage
) -> None:
    api.respond_with([{"content": "hi", "usage": usage}])
    assert (await model.complete(req())).usage == expected


async def test_anthropic_style_usage_keeps_cache_reads_apart(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    usage = {"input_tokens": 40, "output_tokens": 7, "cache_read_input_tokens": 900}
    body = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": usage}
    api.inject("body", body=body)
    reply = await model.complete(req())
    assert reply.usage == Usage(input_tokens=40, output_tokens=7, cache_read_input_tokens=900)


async def test_llama_cpp_timings_give_cache_reads_when_usage_has_none(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    body = {
        "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 3},
        "timings": {"cache_n": 730, "prompt_n": 270},
    }
    api.inject("body", body=body)
    reply = await model.complete(req())
    assert reply.usage == Usage(input_tokens=270, output_tokens=3, cache_read_input_tokens=730)


@pytest.mark.parametrize("usage", [None, "omit", {"prompt_tokens": None}])
async def test_usage_missing_or_null_is_estimated_so_budgets_still_count(
    api: FakeChatAPI, model: OpenAIChatModel, usage: Any
) -> None:
    api.respond_with([{"content": "x" * 40, "usage": usage}])
    if isinstance(usage, dict):  # the fake merges overrides: send exactly this usage instead
        body = {"choices": [{"message": {"content": "x" * 40}}], "usage": usage}
        api.inject("body", body=body)
    reply = await model.complete(req())
    sent = len(api.requests[-1].body)
    assert reply.usage.output_tokens == 10
    assert reply.usage.input_tokens >= sent // 5  # about a token per 4 characters sent


# --- empty replies and content shapes -----------------------------------------------------------


@pytest.mark.parametrize("content", ["", None, []])
async def test_an_empty_reply_is_a_valid_response_the_loop_can_handle(
    api: FakeChatAPI, model: OpenAIChatModel, content: Any
) -> None:
    api.respond_with([{"content": content}])
    reply = await model.complete(req())
    assert reply.content == [TextBlock(text="")]
    assert reply.stop_reason == "end_turn"


async def test_content_as_a_list_of_text_parts_is_joined(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    parts = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world."}]
    api.respond_with([{"content": parts}])
    assert (await model.complete(req())).content == [TextBlock(text="Hello, world.")]


async def test_the_legacy_function_call_is_a_tool_call(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    message = {"content": None, "function_call": {"name": "read_file", "arguments": '{"path":"a"}'}}
    api.inject("body", body={"choices": [{"message": message, "finish_reason": "function_call"}]})
    reply = await model.complete(req())
    [use] = uses(reply.content)
    assert (use.name, use.input, reply.stop_reason) == ("read_file", {"path": "a"}, "tool_use")


# --- reasoning ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
async def test_reasoning_a_server_parsed_out_is_kept_as_thinking_and_never_sent_back(
    api: FakeChatAPI, model: OpenAIChatModel, key: str
) -> None:
    message = {"content": "The answer is 4.", key: "2 + 2 is 4."}
    api.inject("body", body={"choices": [{"message": message, "finish_reason": "stop"}]})
    reply = await model.complete(req())
    assert reply.content == [
        ThinkingBlock(thinking="2 + 2 is 4."),
        TextBlock(text="The answer is 4."),
    ]
    await model.complete(
        req(
            NewMessage.user("go"),
            NewMessage(role="assistant", content=reply.content),
            NewMessage.user("and?"),
        )
    )
    assert api.chat_requests[-1]["messages"][2] == {
        "role": "assistant",
        "content": "The answer is 4.",
    }


async def test_a_call_thought_about_inside_think_tags_is_not_a_call(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    thought = (
        '<think>\nMaybe:\n{"name": "read_file", "arguments": {"path": "a"}}\nNo.\n</think>\nDone.'
    )
    api.respond_with([{"content": thought}])
    reply = await model.complete(req())
    assert reply.content == [TextBlock(text=thought)] and reply.stop_reason == "end_turn"
