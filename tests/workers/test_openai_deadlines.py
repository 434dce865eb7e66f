"""OpenAIChatModel's limits against the loopback FakeChatAPI: what each real server answers when
a request overflows the context (issue 15 item 1), the per-attempt deadline and the connection it
closes (item 2), and the output-token default."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from store import NewMessage, TextBlock
from tests.fakes.chat_api import FakeChatAPI
from workers._protocol import ModelRequest, ToolSpec
from workers.errors import ContextTooLong, ProviderRejected, ProviderUnavailable
from workers.providers import OpenAIChatModel
from workers.providers.openai import DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT_S

TOOLS = [ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {}})]
HANG_GUARD_S = 8.0  # an attempt the deadline does not cut runs ~20 s: the test fails, not hangs


@pytest.fixture
async def model(api: FakeChatAPI) -> AsyncIterator[OpenAIChatModel]:
    m = OpenAIChatModel("qwen2.5-coder:1.5b", api.base_url, max_retries=3, backoff_base=0.001)
    yield m
    await m.aclose()


def req(max_tokens: int = 8192) -> ModelRequest:
    return ModelRequest(
        system="Be brief.", tools=TOOLS, messages=[NewMessage.user("go")], max_tokens=max_tokens
    )


# --- context overflow -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "params", "server_words"),
    [
        ("llama_ctx", {}, "exceeds the available context size (512 tokens)"),
        ("vllm_ctx", {}, "maximum context length is 4096 tokens"),
        ("ollama_ctx", {}, "the input length exceeds the context length"),
        ("ollama_ctx", {"status": 500}, "the input length exceeds the context length"),
        ("too_long", {}, "context_length_exceeded"),
    ],
)
async def test_each_servers_context_overflow_is_context_too_long_and_never_retried(
    api: FakeChatAPI, model: OpenAIChatModel, kind: str, params: dict[str, Any], server_words: str
) -> None:
    api.inject(kind, times=5, **params)
    with pytest.raises(ContextTooLong) as info:
        await model.complete(req())
    message = str(info.value)
    assert len(api.requests) == 1
    assert message.startswith(f"openai:qwen2.5-coder:1.5b@{api.base_url}: ")
    assert server_words in message
    assert "llama-server -c" in message and "--max-model-len" in message and "num_ctx" in message
    assert "\n" not in message


async def test_a_prompt_alone_over_the_context_says_fewer_output_tokens_will_not_help(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    api.inject("llama_ctx", prompt=2015, ctx=512)
    with pytest.raises(ContextTooLong) as info:
        await model.complete(req())
    assert "The prompt alone (2015 tokens) is over the 512-token context" in str(info.value)
    assert "fewer output tokens will not help" in str(info.value)


async def test_prompt_plus_output_over_the_context_names_the_max_output_tokens_that_fit(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    api.inject("vllm_ctx", ctx=4096, prompt=1000, completion=4000)
    with pytest.raises(ContextTooLong) as info:
        await model.complete(req())
    assert "max_output_tokens (now 4000) at most 3096 fits this prompt" in str(info.value)


async def test_an_unrelated_400_is_still_a_rejection(api: FakeChatAPI) -> None:
    api.inject("body", status=400, body={"error": {"message": "unknown field 'foo'"}})
    model = OpenAIChatModel("m", api.base_url, max_retries=3)
    with pytest.raises(ProviderRejected, match="unknown field 'foo'"):
        await model.complete(req())
    await model.aclose()


# --- the deadline -------------------------------------------------------------------------------


async def test_a_server_dribbling_its_answer_is_cut_at_the_deadline_and_sees_the_client_go(
    api: FakeChatAPI,
) -> None:
    # a byte every 50 ms never trips a per-read timeout of 0.5 s; the whole reply takes ~20 s
    api.inject("dribble", times=5, interval_s=0.05)
    model = OpenAIChatModel("m", api.base_url, timeout=0.5, max_retries=4, backoff_base=0.001)
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await asyncio.wait_for(model.complete(req()), HANG_GUARD_S)
    finally:
        await model.aclose()
    assert "no complete answer within the 0.5 s request timeout" in str(info.value)
    assert "request_timeout_s" in str(info.value)
    assert len(api.requests) == 2  # a deadline is retried once, not max_retries times
    # each cut attempt closed its connection, so the server stops generating
    assert await asyncio.to_thread(api.wait_for_disconnects, 2, timeout=5.0)


async def test_a_deadline_then_an_answer_succeeds(api: FakeChatAPI) -> None:
    api.inject("dribble", interval_s=0.05)
    model = OpenAIChatModel("m", api.base_url, timeout=0.5, backoff_base=0.001)
    try:
        reply = await asyncio.wait_for(model.complete(req()), HANG_GUARD_S)
    finally:
        await model.aclose()
    assert reply.content == [TextBlock(text="ok")]
    assert len(api.requests) == 2


async def test_a_slow_but_complete_dribble_inside_the_deadline_is_an_answer(
    api: FakeChatAPI,
) -> None:
    api.inject("dribble", interval_s=0.001)
    model = OpenAIChatModel("m", api.base_url, timeout=30)
    reply = await model.complete(req())
    await model.aclose()
    assert reply.content == [TextBlock(text="ok")]
    assert api.disconnects == []


def test_defaults_suit_a_local_model() -> None:
    model = OpenAIChatModel("m", "http://127.0.0.1:8080/v1")
    assert DEFAULT_TIMEOUT_S == 300.0 and DEFAULT_MAX_TOKENS == 4096
    assert model.max_tokens_for(req(8192)) == 4096  # not the loop's 8,192
    assert model.max_tokens_for(req(1000)) == 1000
    set_ = OpenAIChatModel("m", "http://127.0.0.1:8080/v1", max_tokens=9000, timeout=60)
    assert set_.max_tokens_for(req(8192)) == 9000
    with pytest.raises(ValueError, match="timeout"):
        OpenAIChatModel("m", "http://127.0.0.1:8080/v1", timeout=0)
    with pytest.raises(ValueError, match="max_tokens"):
        OpenAIChatModel("m", "http://127.0.0.1:8080/v1", max_tokens=0)


async def test_the_output_token_cap_is_what_the_server_receives(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    await model.complete(req(8192))
    capped = OpenAIChatModel("m", api.base_url, max_tokens=512)
    await capped.complete(req(8192))
    await capped.aclose()
    assert [r["max_tokens"] for r in api.chat_requests] == [DEFAULT_MAX_TOKENS, 512]


async def test_without_retries_a_deadline_still_says_which_knob_to_turn(api: FakeChatAPI) -> None:
    api.inject("dribble", interval_s=0.05)
    model = OpenAIChatModel("m", api.base_url, timeout=0.3, max_retries=0)
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await asyncio.wait_for(model.complete(req()), HANG_GUARD_S)
    finally:
        await model.aclose()
    assert "request_timeout_s" in str(info.value) and "now 4096" in str(info.value)
    assert len(api.requests) == 1


async def test_a_cancelled_request_closes_its_connection_too(api: FakeChatAPI) -> None:
    # a worker's own timeout_s or Ctrl-C cancels the call: the server must see the client go
    api.inject("dribble", interval_s=0.05)
    model = OpenAIChatModel("m", api.base_url, timeout=60)
    try:
        call = asyncio.create_task(model.complete(req()))
        assert await asyncio.to_thread(api.wait_for_requests, 1, timeout=5.0)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        await model.aclose()
    assert await asyncio.to_thread(api.wait_for_disconnects, 1, timeout=5.0)
