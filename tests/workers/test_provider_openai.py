"""OpenAIChatModel against the loopback FakeChatAPI."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from store import NewMessage, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, Usage
from tests.fakes.chat_api import FakeChatAPI
from workers._protocol import ModelRequest, ToolSpec
from workers.errors import (
    BadModelResponse,
    ContextTooLong,
    ProviderRejected,
    ProviderUnavailable,
    SpendLimitReached,
)
from workers.providers import OpenAIChatModel
from workers.providers.openai import chat_completions_url

TOOLS = [
    ToolSpec(
        "read_file",
        "Read a file.",
        {"type": "object", "properties": {"path": {"type": "string"}}},
    )
]


@pytest.fixture
async def model(api: FakeChatAPI) -> AsyncIterator[OpenAIChatModel]:
    m = OpenAIChatModel("qwen3:8b", api.base_url, max_retries=2, backoff_base=0.001)
    yield m
    await m.aclose()


def req(*messages: NewMessage, system: str = "Be brief.") -> ModelRequest:
    return ModelRequest(system=system, tools=TOOLS, messages=list(messages), max_tokens=256)


async def test_request_converts_our_blocks_to_chat_messages(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    messages = [
        NewMessage.user("Fix it."),
        NewMessage(
            role="assistant",
            content=[
                ThinkingBlock(thinking="private", signature="s"),
                TextBlock(text="Reading."),
                ToolUseBlock(id="call_1", name="read_file", input={"path": "a.py"}),
                ToolUseBlock(id="call_2", name="read_file", input={"path": "b.py"}),
            ],
        ),
        NewMessage(
            role="user",
            content=[
                ToolResultBlock(tool_use_id="call_1", content="A"),
                ToolResultBlock(tool_use_id="call_2", content="no such file", is_error=True),
                TextBlock(text="Also check c.py."),
            ],
        ),
    ]
    await model.complete(req(*messages))
    assert api.rejections == []
    body = api.chat_requests[0]
    assert body["model"] == "qwen3:8b"
    assert body["max_tokens"] == 256
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": TOOLS[0].input_schema,
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Fix it."},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "b.py"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "A"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: no such file"},
        {"role": "user", "content": "Also check c.py."},
    ]


async def test_tool_call_round_trip(api: FakeChatAPI, model: OpenAIChatModel) -> None:
    api.respond_with(
        [
            {"content": None, "tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]},
            {"content": "All good."},
        ]
    )
    history = [NewMessage.user("Look at x.")]
    first = await model.complete(req(*history))
    assert first.stop_reason == "tool_use"
    [call] = first.content
    assert isinstance(call, ToolUseBlock)
    assert call.name == "read_file"
    assert call.input == {"path": "x"}
    history += [
        NewMessage(role="assistant", content=first.content),
        NewMessage(role="user", content=[ToolResultBlock(tool_use_id=call.id, content="42")]),
    ]
    second = await model.complete(req(*history))
    assert second.content == [TextBlock(text="All good.")]
    assert second.stop_reason == "end_turn"
    assert api.rejections == []
    assert api.chat_requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call.id,
        "content": "42",
    }


async def test_arguments_that_are_not_json_reach_the_loop_raw(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    api.respond_with(
        [{"tool_calls": [{"name": "read_file", "arguments": '{"path": "x"', "id": "call_b"}]}]
    )
    reply = await model.complete(req(NewMessage.user("go")))
    assert reply.content == [
        ToolUseBlock(id="call_b", name="read_file", input={"_raw_arguments": '{"path": "x"'})
    ]


@pytest.mark.parametrize(
    ("finish", "calls", "expected"),
    [
        ("stop", False, "end_turn"),
        ("tool_calls", True, "tool_use"),
        ("stop", True, "tool_use"),  # some local servers say "stop" with tool calls
        ("length", False, "max_tokens"),
        ("content_filter", False, "refusal"),
    ],
)
async def test_finish_reason_maps_to_stop_reason(
    api: FakeChatAPI, model: OpenAIChatModel, finish: str, calls: bool, expected: str
) -> None:
    reply_spec: dict[str, Any] = {"content": "x", "finish_reason": finish}
    if calls:
        reply_spec["tool_calls"] = [{"name": "read_file", "arguments": "{}"}]
    api.respond_with([reply_spec])
    reply = await model.complete(req(NewMessage.user("go")))
    assert reply.stop_reason == expected


async def test_cached_prompt_tokens_are_cache_reads(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    api.respond_with(
        [
            {
                "content": "hi",
                "usage": {
                    "prompt_tokens": 1000,
                    "completion_tokens": 7,
                    "prompt_tokens_details": {"cached_tokens": 800},
                },
            }
        ]
    )
    reply = await model.complete(req(NewMessage.user("go")))
    assert reply.usage == Usage(input_tokens=200, output_tokens=7, cache_read_input_tokens=800)


@pytest.mark.parametrize("kind", ["non_json", "no_choices"])
async def test_body_without_choices_is_bad_model_response(
    api: FakeChatAPI, model: OpenAIChatModel, kind: str
) -> None:
    api.inject(kind)
    with pytest.raises(BadModelResponse):
        await model.complete(req(NewMessage.user("go")))
    assert len(api.requests) == 1


@pytest.mark.parametrize("kind", ["429", "500", "drop"])
async def test_transient_failure_is_retried(
    api: FakeChatAPI, model: OpenAIChatModel, kind: str
) -> None:
    api.inject(kind)
    reply = await model.complete(req(NewMessage.user("go")))
    assert reply.content == [TextBlock(text="ok")]
    assert len(api.requests) == 2


async def test_429_honours_retry_after(api: FakeChatAPI, model: OpenAIChatModel) -> None:
    api.inject("429", retry_after="0.2")
    started = time.monotonic()
    await model.complete(req(NewMessage.user("go")))
    assert time.monotonic() - started >= 0.2


async def test_persistent_server_errors_give_up(api: FakeChatAPI, model: OpenAIChatModel) -> None:
    api.inject("500", times=10)
    with pytest.raises(ProviderUnavailable) as info:
        await model.complete(req(NewMessage.user("go")))
    assert info.value.attempts == 3
    assert len(api.requests) == 3


async def test_timeout_is_retried(api: FakeChatAPI) -> None:
    model = OpenAIChatModel("m", api.base_url, timeout=0.75, backoff_base=0.001)
    api.inject("slow", delay_s=30)  # woken when the server closes
    reply = await model.complete(req(NewMessage.user("go")))
    await model.aclose()
    assert reply.content == [TextBlock(text="ok")]
    assert len(api.requests) == 2


async def test_quota_exhausted_is_spend_limit(api: FakeChatAPI, model: OpenAIChatModel) -> None:
    api.inject("quota", times=3)
    with pytest.raises(SpendLimitReached):
        await model.complete(req(NewMessage.user("go")))
    assert len(api.requests) == 1


async def test_context_length_is_context_too_long(api: FakeChatAPI, model: OpenAIChatModel) -> None:
    api.inject("too_long", times=3)
    with pytest.raises(ContextTooLong, match="maximum context length"):
        await model.complete(req(NewMessage.user("go")))
    assert len(api.requests) == 1


async def test_unanswered_tool_call_is_rejected(api: FakeChatAPI, model: OpenAIChatModel) -> None:
    broken = [
        NewMessage.user("go"),
        NewMessage(role="assistant", content=[ToolUseBlock(id="call_x", name="read_file")]),
        NewMessage.user("never answered"),
    ]
    with pytest.raises(ProviderRejected, match="call_x"):
        await model.complete(req(*broken))
    assert len(api.requests) == 1
    assert "did not have response messages: call_x" in api.rejections[0].message


async def test_api_key_from_environment_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    with FakeChatAPI(api_key="sk-env") as api:
        model = OpenAIChatModel("m", api.base_url)
        assert "sk-env" not in repr(model)
        await model.complete(req(NewMessage.user("go")))
        wrong = OpenAIChatModel("m", api.base_url, api_key="sk-wrong")
        with pytest.raises(ProviderRejected) as info:
            await wrong.complete(req(NewMessage.user("go")))
        await model.aclose()
        await wrong.aclose()
    assert info.value.status_code == 401


async def test_base_url_without_v1_reaches_v1_chat_completions(api: FakeChatAPI) -> None:
    model = OpenAIChatModel("m", api.root_url)
    await model.complete(req(NewMessage.user("go")))
    await model.aclose()
    assert api.requests[0].path == "/v1/chat/completions"


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://localhost:11434", "http://localhost:11434/v1/chat/completions"),
        ("http://localhost:11434/", "http://localhost:11434/v1/chat/completions"),
        ("http://localhost:8000/v1", "http://localhost:8000/v1/chat/completions"),
        ("http://localhost:8000/v1/", "http://localhost:8000/v1/chat/completions"),
        ("https://h/v1beta/openai", "https://h/v1beta/openai/chat/completions"),
        ("http://h/v1/chat/completions", "http://h/v1/chat/completions"),
    ],
)
def test_chat_completions_url_rule(base: str, url: str) -> None:
    assert chat_completions_url(base) == url


def test_spec_and_cost_of_a_local_model() -> None:
    model = OpenAIChatModel("llama3.1:8b", "http://localhost:11434/v1")
    assert model.spec == "openai:llama3.1:8b@http://localhost:11434/v1"
    assert model.cost_usd(Usage(input_tokens=10**6)) == 0.0
