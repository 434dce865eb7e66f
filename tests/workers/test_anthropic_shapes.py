"""A 200 whose body is not a Messages API response: the real SDK over loopback HTTP parses it
leniently, so ``AnthropicModel`` checks what it translates and raises ``BadModelResponse``
naming the provider and the fault — and ``threadloom run`` exits 4 with one error line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from store import NewMessage, TextBlock, ToolUseBlock
from tests.fakes.messages_api import FakeMessagesAPI
from workers._protocol import ModelRequest
from workers.errors import BadModelResponse
from workers.providers import AnthropicModel

MODEL = "claude-sonnet-4-5"
KEY = "sk-ant-shapes-key-0123456789"
USAGE = {"input_tokens": 3, "output_tokens": 2}
GONE = object()


def message(**fields: Any) -> dict[str, Any]:
    """A well-formed Messages API response with ``fields`` replaced (``GONE``: removed)."""
    body: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": dict(USAGE),
    }
    for key, value in fields.items():
        if value is GONE:
            body.pop(key)
        else:
            body[key] = value
    return body


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as server:
        yield server


@pytest.fixture
async def model(api: FakeMessagesAPI) -> AsyncIterator[AnthropicModel]:
    m = AnthropicModel(MODEL, api_key=KEY, base_url=api.base_url, backoff_base=0.001)
    yield m
    await m.aclose()


def request() -> ModelRequest:
    return ModelRequest(system="", tools=[], messages=[NewMessage.user("hi")])


BAD_BODIES: list[tuple[str, Any, str, str]] = [
    # (id, body, content type, what the error must say)
    ("empty-object", {}, "application/json", "content is missing, not a list of blocks"),
    ("content-string", {"content": "x"}, "application/json", "content is a string, not a list"),
    ("json-array", [1, 2], "application/json", "it is an array, not an object"),
    ("json-null", None, "application/json", "it is null, not an object"),
    ("json-string", b'"ok"', "application/json", "it is a string, not an object"),
    ("html", b"<html><body>502 Bad Gateway</body></html>", "text/html", "not JSON (text/html)"),
    ("html-as-json", b"<html>oops</html>", "application/json", "not JSON (application/json)"),
    ("empty-body", b"", "application/json", "not JSON (application/json): (empty)"),
    ("unknown-block", message(content=[{"type": "weird"}]), "", "content[0] has the unknown type"),
    ("untyped-block", message(content=[{"text": "x"}]), "", "content[0] has no type"),
    ("block-not-object", message(content=["hi"]), "", "content[0] is a string, not a content"),
    ("text-missing", message(content=[{"type": "text"}]), "", "content[0].text is missing"),
    (
        "text-not-string",
        message(content=[{"type": "text", "text": 5}]),
        "",
        "content[0].text is a number, not a string",
    ),
    (
        "tool-use-no-id",
        message(content=[{"type": "tool_use", "name": "bash", "input": {}}]),
        "",
        "content[0].id is missing",
    ),
    (
        "tool-use-no-name",
        message(content=[{"type": "tool_use", "id": "t1", "name": "", "input": {}}]),
        "",
        "content[0].name is a string, not a non-empty string",
    ),
    (
        "tool-use-no-input",
        message(content=[{"type": "tool_use", "id": "t1", "name": "bash"}]),
        "",
        "content[0].input is missing",
    ),
    (
        "thinking-unsigned",
        message(content=[{"type": "thinking", "thinking": "hm"}]),
        "",
        "content[0].signature is missing",
    ),
    ("usage-missing", message(usage=GONE), "", "usage is missing, not an object"),
    (
        "usage-string-count",
        message(usage={"input_tokens": "3", "output_tokens": 2}),
        "",
        "usage.input_tokens is a string, not a token count",
    ),
    (
        "usage-negative",
        message(usage={"input_tokens": 3, "output_tokens": -1}),
        "",
        "usage.output_tokens is a number, not a token count",
    ),
    ("stop-reason-number", message(stop_reason=5), "", "stop_reason is a number, not a string"),
    ("model-object", message(model={"x": 1}), "", "model is an object, not a string"),
    ("not-a-message", message(type="completion"), "", "its type is 'completion', not 'message'"),
    ("user-role", message(role="user"), "", "its role is 'user', not 'assistant'"),
    (
        "error-with-200",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        "",
        "it is an error: overloaded_error: Overloaded",
    ),
]


@pytest.mark.parametrize(
    ("body", "content_type", "said"),
    [case[1:] for case in BAD_BODIES],
    ids=[case[0] for case in BAD_BODIES],
)
async def test_a_200_that_is_not_a_messages_response_is_bad_model_response(
    api: FakeMessagesAPI, model: AnthropicModel, body: Any, content_type: str, said: str
) -> None:
    api.inject("body", body=body, content_type=content_type or "application/json")
    with pytest.raises(BadModelResponse) as info:
        await model.complete(request())
    text = str(info.value)
    assert text.startswith(f"anthropic {MODEL}: HTTP 200, but "), text
    assert said in text, text
    assert "\n" not in text
    assert info.value.status_code == 200 and info.value.attempts == 1
    assert len(api.requests) == 1  # not retried: the server speaks another protocol


async def test_a_bad_body_that_echoes_the_key_does_not_show_it(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.inject("body", body=f"<p>bad key {KEY}</p>".encode(), content_type="text/html")
    with pytest.raises(BadModelResponse) as info:
        await model.complete(request())
    assert KEY not in str(info.value) and "bad key" in str(info.value)


async def test_an_html_page_is_shown_short_and_on_one_line(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    page = b"<html>\n<body>\n" + b"<p>login required</p>\n" * 200 + b"</body></html>"
    api.inject("body", body=page, content_type="text/html; charset=utf-8")
    with pytest.raises(BadModelResponse) as info:
        await model.complete(request())
    text = str(info.value)
    assert "not JSON (text/html): '<html> <body> <p>login required</p>" in text
    assert len(text) < 300 and "\n" not in text


async def test_extra_fields_and_blocks_we_do_not_translate_still_pass(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    body = message(
        content=[
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}},
            {"type": "text", "text": "calling", "citations": None},
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}},
        ],
        stop_reason="tool_use",
        usage={**USAGE, "cache_read_input_tokens": None, "service_tier": "standard"},
        container=None,
        gateway_trace="abc",
    )
    api.inject("body", body=body)
    reply = await model.complete(request())
    assert reply.content == [
        TextBlock(text="calling"),
        ToolUseBlock(id="t1", name="bash", input={"command": "ls"}),
    ]
    assert reply.stop_reason == "tool_use"
    assert reply.usage.input_tokens == 3 and reply.usage.cache_read_input_tokens == 0


async def test_a_stop_reason_newer_than_this_code_is_still_judged_by_content(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.inject("body", body=message(stop_reason="some_new_reason"))
    reply = await model.complete(request())
    assert reply.stop_reason == "end_turn" and reply.content == [TextBlock(text="hi")]


JOB = """[job]
name = "shapes"
goal = "g"
workspace = "ws"
model = "anthropic:claude-sonnet-4-5"
"""


@pytest.mark.parametrize(
    ("body", "content_type", "said"),
    [
        ({}, "application/json", "content is missing"),
        (b"<html>proxy login</html>", "text/html", "not JSON (text/html)"),
    ],
    ids=["empty-object", "html"],
)
def test_threadloom_run_exits_4_with_one_line_naming_the_provider(
    tmp_path: Path, body: Any, content_type: str, said: str
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "job.toml").write_text(JOB)
    with FakeMessagesAPI() as api:
        api.inject("body", times=10, body=body, content_type=content_type)
        db = str(tmp_path / "t.db")
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", "--db", db, "--json", "run", "job.toml"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": KEY},
            check=False,
        )
    assert proc.returncode == 4, proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    # one error line (the lines before it are the progress display's, one per thread)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("threadloom: ")]
    assert len(errors) == 1 and errors[0].startswith("threadloom: error: "), proc.stderr
    assert f"anthropic {MODEL}: HTTP 200, but" in errors[0] and said in errors[0], errors[0]
    doc = json.loads(proc.stdout)
    assert doc["error"]["code"] == 4 and doc["status"] == "failed"
    assert KEY not in proc.stdout + proc.stderr
