"""AnthropicModel, through the real SDK, against the loopback FakeMessagesAPI."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest

from store import (
    NewMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tests.fakes.messages_api import FakeMessagesAPI
from workers._protocol import ModelRequest, ToolSpec
from workers.errors import (
    ContextTooLong,
    ModelSpecError,
    ProviderRejected,
    ProviderUnavailable,
    SpendLimitReached,
)
from workers.providers import AnthropicModel
from workers.providers.anthropic import build_params

MODEL = "claude-sonnet-4-5"
TOOLS = [
    ToolSpec(
        "read_file",
        "Read a file.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    ToolSpec("bash", "Run a command.", {"type": "object", "properties": {}}),
]


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as server:
        yield server


@pytest.fixture
async def model(api: FakeMessagesAPI) -> AsyncIterator[AnthropicModel]:
    m = AnthropicModel(
        MODEL, api_key="sk-test", base_url=api.base_url, max_retries=3, backoff_base=0.001
    )
    yield m
    await m.aclose()


def conversation() -> list[NewMessage]:
    """A tool round trip: text, signed thinking, two parallel calls, their results, more text."""
    return [
        NewMessage.user("Fix the tokenizer."),
        NewMessage(
            role="assistant",
            content=[
                ThinkingBlock(thinking="Look first.", signature="sig-1"),
                TextBlock(text="Reading."),
                ToolUseBlock(id="toolu_a", name="read_file", input={"path": "tok.py"}),
                ToolUseBlock(id="toolu_b", name="bash", input={"command": "pytest -q"}),
            ],
        ),
        NewMessage(
            role="user",
            content=[
                ToolResultBlock(tool_use_id="toolu_a", content="def tokenize(): ..."),
                ToolResultBlock(
                    tool_use_id="toolu_b", content=[TextBlock(text="1 failed")], is_error=True
                ),
            ],
        ),
        NewMessage.assistant("Found it."),
        NewMessage.user("Go on."),
    ]


def req(messages: list[NewMessage], system: str = "You are a worker.") -> ModelRequest:
    return ModelRequest(system=system, tools=TOOLS, messages=messages, max_tokens=1024)


def count_cache_control(body: Any) -> int:
    if isinstance(body, dict):
        return int("cache_control" in body) + sum(count_cache_control(v) for v in body.values())
    if isinstance(body, list):
        return sum(count_cache_control(v) for v in body)
    return 0


async def test_tool_round_trip_converts_both_ways_and_passes_validation(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.respond_with(
        lambda _: {
            "content": [
                {"type": "thinking", "thinking": "Hmm.", "signature": "sig-2"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Editing."},
                {"type": "tool_use", "id": "toolu_c", "name": "bash", "input": {"command": "ls"}},
            ],
            "usage": {"output_tokens": 42},
        }
    )
    reply = await model.complete(req(conversation()))

    assert api.rejections == []
    sent = api.message_requests[0]
    assert sent["model"] == MODEL
    assert sent["max_tokens"] == 1024
    assert sent["system"] == [
        {"type": "text", "text": "You are a worker.", "cache_control": {"type": "ephemeral"}}
    ]
    assert sent["tools"][0] == {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": TOOLS[0].input_schema,
    }
    assert sent["tools"][1]["cache_control"] == {"type": "ephemeral"}
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Fix the tokenizer."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Look first.", "signature": "sig-1"},
                {"type": "text", "text": "Reading."},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "read_file",
                    "input": {"path": "tok.py"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_b",
                    "name": "bash",
                    "input": {"command": "pytest -q"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "def tokenize(): ..."},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [{"type": "text", "text": "1 failed"}],
                    "is_error": True,
                    # the message that ended the previous request: its prefix is in the cache
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Found it."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral"}}],
        },
    ]
    assert count_cache_control(sent) == 4

    assert reply.content == [
        ThinkingBlock(thinking="Hmm.", signature="sig-2"),
        TextBlock(text="Editing."),
        ToolUseBlock(id="toolu_c", name="bash", input={"command": "ls"}),
    ]
    assert reply.stop_reason == "tool_use"
    assert reply.model == MODEL
    assert reply.usage.output_tokens == 42
    assert reply.usage.total_input > 0
    assert reply.usage == Usage(**{k: v for k, v in api.usages[0].items()})


async def test_usage_counts_that_the_api_omits_are_zero(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.respond_with(
        lambda _: {
            "content": "hi",
            "usage": {"cache_read_input_tokens": None, "cache_creation_input_tokens": None},
        }
    )
    reply = await model.complete(req([NewMessage.user("hi")]))
    assert reply.usage.cache_read_input_tokens == 0
    assert reply.usage.cache_creation_input_tokens == 0
    assert reply.content == [TextBlock(text="hi")]
    assert reply.stop_reason == "end_turn"


@pytest.mark.parametrize(
    "messages",
    [
        [NewMessage.user("one")],
        [NewMessage.user("one"), NewMessage.assistant("two"), NewMessage.user("three")],
        conversation(),
        [*conversation(), NewMessage.assistant("prefill")],
    ],
    ids=["single", "three", "tool-round-trip", "assistant-last"],
)
@pytest.mark.parametrize("system", ["", "sys"])
@pytest.mark.parametrize("tools", [[], TOOLS])
def test_cache_breakpoints_never_exceed_four(
    messages: list[NewMessage], system: str, tools: list[ToolSpec]
) -> None:
    request = ModelRequest(system=system, tools=tools, messages=messages)
    params = build_params(request, model=MODEL, max_tokens=10)
    marks = count_cache_control(params)
    assert 1 <= marks <= 4
    newest = params["messages"][-1]["content"][-1]
    assert newest["cache_control"] == {"type": "ephemeral"}


async def test_outgoing_cache_markers_never_reach_our_stored_messages(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    messages = conversation()
    before = [m.model_dump(mode="json") for m in messages]
    schemas_before = json.dumps([t.input_schema for t in TOOLS])
    await model.complete(req(messages))
    await model.complete(req(messages))
    after = [m.model_dump(mode="json") for m in messages]
    assert after == before
    assert "cache_control" not in json.dumps(after)
    assert json.dumps([t.input_schema for t in TOOLS]) == schemas_before
    assert count_cache_control(api.message_requests[1]) == 4


async def test_rebuilt_request_is_byte_identical(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    await model.complete(req(conversation()))
    rebuilt = [NewMessage.model_validate(m.model_dump()) for m in conversation()]
    await model.complete(req(rebuilt))
    assert api.requests[0].body == api.requests[1].body
    assert api.usages[1]["cache_read_input_tokens"] > 0
    assert api.usages[1]["cache_creation_input_tokens"] == 0


async def test_empty_text_and_unsigned_thinking_are_not_sent(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    messages = [
        NewMessage.user("hi"),
        NewMessage(
            role="assistant",
            content=[
                ThinkingBlock(thinking="local model thought"),
                TextBlock(text=""),
                TextBlock(text=" \n"),
            ],
        ),
        NewMessage.user("again"),
    ]
    await model.complete(req(messages))
    assert api.rejections == []
    assert api.message_requests[0]["messages"][1]["content"] == [
        {"type": "text", "text": "(empty)"}
    ]


# --- faults -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["429", "529", "500", "drop"])
async def test_transient_failure_is_retried_then_succeeds(
    api: FakeMessagesAPI, model: AnthropicModel, kind: str
) -> None:
    api.inject(kind)
    reply = await model.complete(req([NewMessage.user("hi")]))
    assert reply.content == [TextBlock(text="ok")]
    assert len(api.requests) == 2
    assert api.requests[0].outcome == f"fault:{kind}"
    assert api.requests[1].outcome == "ok"


async def test_429_waits_for_retry_after_ms(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.inject("429", retry_after_ms=200)
    started = time.monotonic()
    await model.complete(req([NewMessage.user("hi")]))
    assert time.monotonic() - started >= 0.2
    assert len(api.requests) == 2


async def test_429_waits_for_retry_after_seconds(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.inject("429", retry_after_ms=None, retry_after="0.15")
    started = time.monotonic()
    await model.complete(req([NewMessage.user("hi")]))
    assert time.monotonic() - started >= 0.15
    assert "retry-after-ms" not in json.dumps(api.requests[0].headers)


async def test_retry_after_is_capped(api: FakeMessagesAPI) -> None:
    model = AnthropicModel(
        MODEL, api_key="k", base_url=api.base_url, backoff_base=0.001, retry_after_cap=0.05
    )
    api.inject("429", retry_after_ms=None, retry_after=3600)
    started = time.monotonic()
    await model.complete(req([NewMessage.user("hi")]))
    await model.aclose()
    assert time.monotonic() - started < 60  # not the hour the server asked for


async def test_timeout_is_retried(api: FakeMessagesAPI) -> None:
    model = AnthropicModel(
        MODEL, api_key="k", base_url=api.base_url, timeout=0.75, backoff_base=0.001
    )
    api.inject("slow", delay_s=30)  # woken when the server closes
    reply = await model.complete(req([NewMessage.user("hi")]))
    await model.aclose()
    assert reply.content == [TextBlock(text="ok")]
    assert len(api.requests) == 2


async def test_spend_limit_stops_at_once(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.inject("spend_limit", times=5)
    with pytest.raises(SpendLimitReached) as info:
        await model.complete(req([NewMessage.user("hi")]))
    assert len(api.requests) == 1
    assert info.value.attempts == 1
    assert info.value.status_code == 429
    assert "spend limit" in str(info.value)
    assert isinstance(info.value.__cause__, anthropic.RateLimitError)


@pytest.mark.parametrize(
    "message",
    [
        "You have reached your specified API usage limits. You will regain access on "
        "2030-01-01 at 00:00 UTC.",
        "Your credit limit has been reached.",
    ],
)
async def test_spend_limit_is_recognised_by_its_wording(
    api: FakeMessagesAPI, model: AnthropicModel, message: str
) -> None:
    api.inject("spend_limit", message=message)
    with pytest.raises(SpendLimitReached):
        await model.complete(req([NewMessage.user("hi")]))
    assert len(api.requests) == 1


async def test_rate_limit_that_mentions_usage_is_still_retried(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.inject(
        "spend_limit",
        message="This request would exceed the rate limit for your organization; see the "
        "response headers for current usage limits and retry later.",
    )
    reply = await model.complete(req([NewMessage.user("hi")]))
    assert reply.content == [TextBlock(text="ok")]
    assert len(api.requests) == 2


async def test_prompt_too_long_is_context_too_long_and_not_retried(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.inject("too_long", times=5)
    with pytest.raises(ContextTooLong, match="prompt is too long"):
        await model.complete(req([NewMessage.user("hi")]))
    assert len(api.requests) == 1


async def test_prompt_over_the_context_window_is_context_too_long() -> None:
    with FakeMessagesAPI(context_window=50) as small:
        model = AnthropicModel(MODEL, api_key="k", base_url=small.base_url, backoff_base=0.001)
        with pytest.raises(ContextTooLong) as info:
            await model.complete(req([NewMessage.user("x" * 400)]))
        await model.aclose()
    assert info.value.attempts == 1
    assert len(small.requests) == 1


async def test_persistent_overload_gives_up_after_max_retries(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.inject("529", times=50)
    with pytest.raises(ProviderUnavailable) as info:
        await model.complete(req([NewMessage.user("hi")]))
    assert info.value.attempts == 4  # max_retries=3, plus the first attempt
    assert len(api.requests) == 4
    assert info.value.status_code == 529
    assert "overloaded_error" in str(info.value)


async def test_persistent_connection_drops_give_up_with_attempts(
    api: FakeMessagesAPI,
) -> None:
    model = AnthropicModel(MODEL, api_key="k", base_url=api.base_url, max_retries=1, backoff_base=0)
    api.inject("drop", times=50)
    with pytest.raises(ProviderUnavailable) as info:
        await model.complete(req([NewMessage.user("hi")]))
    await model.aclose()
    assert info.value.attempts == 2
    assert len(api.requests) == 2


async def test_unanswered_tool_use_is_rejected_by_the_fake_like_the_api(
    api: FakeMessagesAPI,
) -> None:
    client = anthropic.AsyncAnthropic(api_key="k", base_url=api.base_url, max_retries=0)
    try:
        with pytest.raises(anthropic.BadRequestError):
            await client.messages.create(
                model=MODEL,
                max_tokens=10,
                messages=[
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "tool_use", "id": "toolu_x", "name": "t", "input": {}}
                        ],
                    },
                    {"role": "user", "content": "no result"},
                ],
            )
    finally:
        await client.close()
    [rejection] = api.rejections
    assert rejection.status == 400
    assert rejection.error_type == "invalid_request_error"
    assert "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_x" in (
        rejection.message
    )


async def test_validator_rejection_is_provider_rejected_without_retry(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    broken = [
        NewMessage.user("hi"),
        NewMessage(role="assistant", content=[ToolUseBlock(id="toolu_x", name="bash")]),
        NewMessage.user("forgot the result"),
    ]
    with pytest.raises(ProviderRejected) as info:
        await model.complete(req(broken))
    assert info.value.status_code == 400
    assert info.value.attempts == 1
    assert len(api.requests) == 1
    assert "toolu_x" in str(info.value)


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [{"role": "assistant", "content": "hi"}],
            'first message must use the "user" role',
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "ok"},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_z", "content": "x"}],
                },
            ],
            "unexpected `tool_use_id` found in `tool_result` blocks: toolu_z",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_y", "name": "t", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "first"},
                        {"type": "tool_result", "tool_use_id": "toolu_y", "content": "x"},
                    ],
                },
            ],
            "`tool_result` blocks must come first",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            "text content blocks must be non-empty",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}}
                        for i in range(5)
                    ],
                }
            ],
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
    ],
    ids=["assistant-first", "orphan-result", "result-not-first", "empty-text", "five-breakpoints"],
)
async def test_fake_rejects_what_the_real_api_rejects(
    api: FakeMessagesAPI, messages: list[dict[str, Any]], expected: str
) -> None:
    client = anthropic.AsyncAnthropic(api_key="k", base_url=api.base_url, max_retries=0)
    try:
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(model=MODEL, max_tokens=10, messages=messages)  # type: ignore[arg-type]
    finally:
        await client.close()
    assert expected in api.rejections[0].message
    assert expected in str(info.value)


async def test_duplicate_tool_names_are_rejected(api: FakeMessagesAPI) -> None:
    model = AnthropicModel(MODEL, api_key="k", base_url=api.base_url)
    twice = ModelRequest(system="", tools=[TOOLS[0], TOOLS[0]], messages=[NewMessage.user("x")])
    with pytest.raises(ProviderRejected, match="Tool names must be unique"):
        await model.complete(twice)
    await model.aclose()


# --- configuration ------------------------------------------------------------------------------


def test_missing_api_key_is_a_configuration_error_naming_the_variable() -> None:
    with pytest.raises(ModelSpecError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(MODEL)


async def test_key_and_base_url_come_from_the_environment(
    api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    model = AnthropicModel(MODEL)
    assert "sk-from-env" not in repr(model)
    await model.complete(req([NewMessage.user("hi")]))
    await model.aclose()
    headers = api.requests[0].headers
    assert "sk-from-env" in (headers.get("x-api-key", "") + headers.get("authorization", ""))


def test_spec_and_cost() -> None:
    model = AnthropicModel("claude-haiku-4-5", api_key="k")
    assert model.spec == "anthropic:claude-haiku-4-5"
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert model.cost_usd(usage) == pytest.approx(6.0)


# --- prompt caching -----------------------------------------------------------------------------


async def test_growing_conversation_is_served_mostly_from_cache(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    system = "You are a careful coding agent. " + "Follow the house rules. " * 300
    turn = 0

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        if turn % 2:
            return {"content": [{"type": "text", "text": f"Step {turn} done. " + "z" * 300}]}
        return {
            "content": [
                {"type": "text", "text": f"Checking step {turn}."},
                {"type": "tool_use", "name": "bash", "input": {"command": f"pytest -k t{turn}"}},
                {"type": "tool_use", "name": "read_file", "input": {"path": f"f{turn}.py"}},
            ]
        }

    api.respond_with(respond)
    messages = [NewMessage.user("Fix every failing test.")]
    shares: list[float] = []
    for turn in range(20):
        reply = await model.complete(req(messages, system=system))
        shares.append(reply.usage.cache_read_input_tokens / reply.usage.total_input)
        messages.append(NewMessage(role="assistant", content=reply.content))
        uses = [b for b in reply.content if isinstance(b, ToolUseBlock)]
        if uses:
            messages.append(
                NewMessage(
                    role="user",
                    content=[ToolResultBlock(tool_use_id=u.id, content="o" * 800) for u in uses],
                )
            )
        else:
            messages.append(NewMessage.user(f"Continue with step {turn + 1}."))
    assert api.rejections == []
    later = api.usages[2:]
    read = sum(u["cache_read_input_tokens"] for u in later)
    total = sum(
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        for u in later
    )
    print("cache-read share per turn:", " ".join(f"{s:.2f}" for s in shares))
    print(f"cache-read share of input, turns 3-20: {read / total:.3f}")
    assert shares[0] == 0.0
    assert read / total >= 0.8
    assert min(shares[2:]) >= 0.8


# --- preflight: the endpoint is connected to once, no request sent ------------------------------


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_preflight_of_a_live_endpoint_sends_it_no_request(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    await model.preflight()
    assert api.requests == []  # a connection came and went: nothing recorded, nothing billed


async def test_preflight_takes_an_endpoint_that_answers_401_as_alive(
    api: FakeMessagesAPI,
) -> None:
    """Only a connection that fails is "dead": a wrong key is the first request's to report."""
    m = AnthropicModel(MODEL, api_key="sk-wrong", base_url=api.base_url, max_retries=0)
    api.inject("body", status=401, body=_auth_error())
    try:
        await m.preflight()
        with pytest.raises(ProviderRejected, match="401"):
            await m.complete(req(conversation()[:1]))
    finally:
        await m.aclose()
    assert len(api.requests) == 1


def _auth_error() -> dict[str, Any]:
    return {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}


async def test_preflight_of_a_closed_port_is_provider_unavailable_naming_the_url() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    m = AnthropicModel(MODEL, api_key="sk-test-secret-key", base_url=url)
    try:
        with pytest.raises(ProviderUnavailable) as caught:
            await m.preflight()
    finally:
        await m.aclose()
    said = str(caught.value)
    assert said.startswith(f"anthropic:{MODEL}: {url}") and "connection refused" in said
    assert caught.value.attempts == 0 and "sk-test-secret-key" not in said


async def test_preflight_reads_anthropic_base_url_as_the_sdk_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    m = AnthropicModel(MODEL, api_key="sk-test")
    try:
        assert m.base_url.rstrip("/") == url
        with pytest.raises(ProviderUnavailable, match="connection refused"):
            await m.preflight()
    finally:
        await m.aclose()


@pytest.mark.parametrize("where", ["argument", "environment", "default"])
def test_the_base_url_is_the_one_the_sdk_would_use(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    given = None
    if where == "argument":
        given = "http://127.0.0.1:9/given"
        monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/ignored")
    elif where == "environment":
        monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/env")
    ours = AnthropicModel(MODEL, api_key="k", base_url=given).base_url
    sdk = anthropic.AsyncAnthropic(api_key="k", base_url=given)
    assert ours.rstrip("/") == str(sdk.base_url).rstrip("/")


def test_a_failed_preflight_never_imports_the_sdk() -> None:
    """The SDK's import (a second or more, several under load) comes with the first request: a
    job whose endpoint is dead fails without paying it (issue 26: under 2 s)."""
    code = (
        "import asyncio, sys\n"
        "from workers.providers.anthropic import AnthropicModel\n"
        "from workers.errors import ProviderUnavailable\n"
        f"m = AnthropicModel('m', api_key='k', base_url='http://127.0.0.1:{_closed_port()}')\n"
        "try:\n"
        "    asyncio.run(m.preflight())\n"
        "except ProviderUnavailable as exc:\n"
        "    print('refused:', exc)\n"
        "print('imported' if 'anthropic' in sys.modules else 'not imported')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "refused:" in out and "connection refused" in out
    assert out.strip().endswith("not imported")
