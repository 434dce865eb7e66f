"""A 200 whose body is not the chat-completions shape (issue 10 item 5) is ``BadModelResponse``
naming the provider (``openai:model@base_url``) and what was wrong, never retried, never an
internal error from deeper down. Real HTTP against the loopback FakeChatAPI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from store import NewMessage
from tests.fakes.chat_api import FakeChatAPI
from workers._protocol import ModelRequest, ToolSpec
from workers.errors import BadModelResponse, ContextTooLong
from workers.providers import OpenAIChatModel

TOOLS = [ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {}})]


def choice(message: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def call(**overrides: Any) -> dict[str, Any]:
    return {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": "{}"},
        **overrides,
    }


SHAPES = [
    (
        "choices-string",
        {"choices": "x"},
        'the response has no "choices" list (choices is a string)',
    ),
    ("no-choices", {"id": "x", "object": "chat.completion"}, 'the response has no "choices" list'),
    ("empty-choices", {"choices": []}, '"choices" is empty'),
    ("choice-number", {"choices": [3]}, "choices[0] is a number, not an object"),
    ("message-number", {"choices": [{"message": 5}]}, "choices[0].message is a number"),
    ("no-message", {"choices": [{"text": "hi"}]}, "choices[0] has no message object"),
    (
        "content-dict",
        choice({"content": {"text": "hi"}}),
        "choices[0].message.content is an object, not a string",
    ),
    ("content-number", choice({"content": 42}), "choices[0].message.content is a number"),
    ("content-part-number", choice({"content": [1]}), "choices[0].message.content[0] is a number"),
    (
        "tool-calls-string",
        choice({"content": None, "tool_calls": "read_file"}),
        "tool_calls is a string, not a list",
    ),
    (
        "tool-calls-dict",
        choice({"content": None, "tool_calls": call()}),
        "tool_calls is an object, not a list",
    ),
    (
        "tool-call-string",
        choice({"tool_calls": ["read_file"]}),
        "tool_calls[0] is a string, not an object",
    ),
    (
        "no-function",
        choice({"tool_calls": [{"id": "c1", "name": "read_file"}]}),
        "tool_calls[0] has no function object",
    ),
    (
        "no-name",
        choice({"tool_calls": [call(function={"arguments": "{}"})]}),
        "tool_calls[0].function has no name",
    ),
    ("array-body", [{"choices": []}], "the response body is an array, not an object"),
    ("string-body", "ok", "the response body is a string, not an object"),
    (
        "error-200",
        {"error": {"message": "model not loaded", "type": "server_error"}},
        "answered HTTP 200 with an error: model not loaded",
    ),
]


@pytest.fixture
async def model(api: FakeChatAPI) -> AsyncIterator[OpenAIChatModel]:
    m = OpenAIChatModel("qwen", api.base_url, max_retries=3, backoff_base=0.001)
    yield m
    await m.aclose()


def req() -> ModelRequest:
    return ModelRequest(system="s", tools=TOOLS, messages=[NewMessage.user("go")])


@pytest.mark.parametrize(("body", "why"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
async def test_a_body_that_is_not_the_api_shape_is_bad_model_response_naming_the_provider(
    api: FakeChatAPI, model: OpenAIChatModel, body: Any, why: str
) -> None:
    api.inject("body", times=5, body=body if not isinstance(body, str) else f'"{body}"')
    with pytest.raises(BadModelResponse) as info:
        await model.complete(req())
    assert str(info.value).startswith(f"openai:qwen@{api.base_url}: ")
    assert why in str(info.value)
    assert info.value.status_code == 200
    assert len(api.requests) == 1  # a server answering another protocol answers so again


@pytest.mark.parametrize(
    ("raw", "content_type", "why"),
    [
        (
            b"<html><body><h1>502 Bad Gateway</h1></body></html>",
            "text/html",
            "not JSON (text/html)",
        ),
        (b"", "application/json", "not JSON (application/json): ''"),
        (b"\xff\xfe{", "application/json", "not JSON"),
    ],
)
async def test_a_body_that_is_not_json_names_its_content_type_and_start(
    api: FakeChatAPI, model: OpenAIChatModel, raw: bytes, content_type: str, why: str
) -> None:
    api.inject("body", body=raw, content_type=content_type)
    with pytest.raises(
        BadModelResponse, match=r"^openai:qwen@http://127\.0\.0\.1:\d+/v1: "
    ) as info:
        await model.complete(req())
    assert why in str(info.value)


async def test_a_200_carrying_a_context_overflow_is_context_too_long(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    # Ollama passes its runner's llama.cpp error on as a string
    inner = '{"error":{"code":400,"message":"request (351 tokens) exceeds the available context size (256 tokens), try increasing it","type":"exceed_context_size_error"}}'  # noqa: E501
    api.inject("body", body={"error": inner})
    with pytest.raises(ContextTooLong, match="exceeds the available context size"):
        await model.complete(req())
