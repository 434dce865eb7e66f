"""The fake servers themselves: the prefix-cache arithmetic and the standalone mode used by
end-to-end tests."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from store import NewMessage, TextBlock, ToolResultBlock, ToolUseBlock
from tests.fakes.messages_api import FakeMessagesAPI, PromptCache, canonical, tokens_of
from workers._protocol import ModelRequest, ToolSpec
from workers.errors import ProviderRejected
from workers.providers import AnthropicModel

ROOT = Path(__file__).resolve().parents[2]
MARK = {"type": "ephemeral"}


def body(*texts: str, marks: tuple[int, ...] = ()) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
    for i in marks:
        blocks[i]["cache_control"] = MARK
    return {"model": "m", "messages": [{"role": "user", "content": blocks}]}


def test_prompt_cache_writes_then_reads_the_longest_breakpoint_prefix() -> None:
    cache = PromptCache()
    a, b, c = "a" * 400, "b" * 400, "c" * 400
    size = {t: tokens_of(canonical({"type": "text", "text": t})) for t in (a, b, c)}
    first = cache.account(body(a, b, c, marks=(1,)))
    assert first == {
        "input_tokens": size[c],
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": size[a] + size[b],
    }
    second = cache.account(body(a, b, c, marks=(1, 2)))
    assert second == {
        "input_tokens": 0,
        "cache_read_input_tokens": size[a] + size[b],
        "cache_creation_input_tokens": size[c],
    }
    changed = cache.account(body("x" * 400, b, c, marks=(1, 2)))
    assert changed["cache_read_input_tokens"] == 0


def test_prompt_cache_expires_and_ignores_short_prefixes() -> None:
    expired = PromptCache(ttl_s=0)
    expired.account(body("a" * 400, marks=(0,)))
    assert expired.account(body("a" * 400, marks=(0,)))["cache_read_input_tokens"] == 0
    short = PromptCache(min_tokens=1024)
    short.account(body("a" * 400, marks=(0,)))
    again = short.account(body("a" * 400, marks=(0,)))
    assert again["cache_read_input_tokens"] == 0
    assert again["cache_creation_input_tokens"] == 0


def test_prompt_cache_is_per_model() -> None:
    cache = PromptCache()
    cache.account(body("a" * 400, marks=(0,)))
    other = body("a" * 400, marks=(0,)) | {"model": "other"}
    assert cache.account(other)["cache_read_input_tokens"] == 0


def test_unknown_path_is_404_and_faults_are_counted() -> None:
    with FakeMessagesAPI() as api:
        reply = httpx.post(api.base_url + "/v1/nothing", json={})
        assert reply.status_code == 404
        with pytest.raises(ValueError, match="unknown fault"):
            api.inject("teapot")
        api.inject("500", times=2)
        assert api.pending_faults == 2
        assert api.requests[0].outcome == "not_found"


async def test_standalone_server_answers_with_a_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "match": "tokenizer",
                        "turns": [
                            {"tool_calls": [{"name": "bash", "input": {"command": "pytest"}}]},
                            {"text": "Fixed."},
                        ],
                    }
                ]
            }
        )
    )
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fakes.messages_api",
        "--port",
        "0",
        "--script",
        str(script),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        line = (await asyncio.wait_for(server.stdout.readline(), timeout=30)).decode()
        assert line.startswith("listening on http://127.0.0.1:")
        base_url = line.split()[-1]
        model = AnthropicModel("claude-haiku-4-5", api_key="k", base_url=base_url)
        tools = [ToolSpec("bash", "Run.", {"type": "object"})]
        history = [NewMessage.user("fix the tokenizer")]
        first = await model.complete(ModelRequest(system="s", tools=tools, messages=history))
        [call] = first.content
        assert isinstance(call, ToolUseBlock)
        assert call.input == {"command": "pytest"}
        history += [
            NewMessage(role="assistant", content=first.content),
            NewMessage(
                role="user", content=[ToolResultBlock(tool_use_id=call.id, content="1 passed")]
            ),
        ]
        second = await model.complete(ModelRequest(system="s", tools=tools, messages=history))
        assert second.content == [TextBlock(text="Fixed.")]
        with pytest.raises(ProviderRejected, match="no rule matches"):
            await model.complete(
                ModelRequest(system="s", tools=tools, messages=[NewMessage.user("unrelated")])
            )
        await model.aclose()
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), timeout=10)
    assert server.returncode == 0
