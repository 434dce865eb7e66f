"""``threadloom run`` on an ``openai:`` model whose server answers badly (issue 10 item 5): the
real command in a subprocess against the loopback FakeChatAPI. A 200 that is not the API's shape
and a request that overflows the server's context both exit 4 (SPEC: the model provider failed)
with one error line naming the provider and what was wrong."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.chat_api import FakeChatAPI

from .conftest import Env

BAD_BODIES = [
    ({"choices": "x"}, 'no "choices" list'),
    ({"choices": [{"message": {"content": {"text": "hi"}}}]}, "content is an object"),
    ({"choices": [{"message": {"tool_calls": {"id": "c"}}}]}, "tool_calls is an object"),
    ([1, 2], "the response body is an array"),
    (b"<html><body>502 Bad Gateway</body></html>", "not JSON (text/html)"),
]


def _job(env: Env, name: str, api: FakeChatAPI) -> str:
    return str(env.job(name, [], model=f"openai:m@{api.base_url}"))


@pytest.mark.parametrize(
    ("body", "why"), BAD_BODIES, ids=["choices", "content", "tool_calls", "array", "html"]
)
def test_a_200_that_is_not_the_api_shape_exits_4_naming_the_provider(
    env: Env, body: Any, why: str
) -> None:
    with FakeChatAPI() as api:
        kind = "text/html" if isinstance(body, bytes) else "application/json"
        api.inject("body", body=body, content_type=kind)
        api.enqueue({"content": "the report"})  # what a retry would get: none is made
        res = env.run("--json", "run", _job(env, "shape", api))
        spec = f"openai:m@{api.base_url}"
        requests = len(api.requests)
    assert res.code == 4, res.stderr
    assert requests == 1
    errors = [line for line in res.stderr.splitlines() if line.startswith("threadloom: error: ")]
    assert len(errors) == 1, res.stderr
    assert spec in errors[0] and why in errors[0]
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert res.json["error"]["code"] == 4 and spec in res.json["error"]["message"]


def test_a_tool_call_id_that_is_not_a_string_gets_a_fresh_one_and_the_run_goes_on(
    env: Env,
) -> None:
    call = {"id": 5, "type": "function", "function": {"name": "nope", "arguments": "{}"}}
    with FakeChatAPI() as api:
        api.inject("body", body={"choices": [{"message": {"content": None, "tool_calls": [call]}}]})
        api.enqueue({"content": "the report"})
        res = env.run("--json", "run", _job(env, "ids", api))
        rejected = list(api.rejections)
    assert res.code == 0, res.stderr
    assert res.json["report"] == "the report"
    assert rejected == []  # the unknown tool's error result paired with the fresh id


def test_a_context_overflow_exits_4_telling_what_to_change(env: Env) -> None:
    with FakeChatAPI() as api:
        api.inject("llama_ctx", times=50, prompt=2015, ctx=512)
        res = env.run("run", _job(env, "overflow", api))
        requests = len(api.requests)
    assert res.code == 4, res.stderr
    [error] = [line for line in res.stderr.splitlines() if line.startswith("threadloom: error: ")]
    assert "exceeds the available context size (512 tokens)" in error
    assert "llama-server -c" in error
    assert requests == 1  # never retried
