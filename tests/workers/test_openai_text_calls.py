"""Tool calls a small model writes as text in ``content`` (issue 15 item 3): recognised by the
OpenAI-compatible provider, over real HTTP against the loopback FakeChatAPI, only for the
request's tools and with arguments that validate; the reply keeps its text beside the call."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from store import NewMessage, Status, Store, TextBlock, ToolResultBlock, ToolUseBlock
from tests.fakes.chat_api import FakeChatAPI
from workers import SUBMIT_RESULT, build_tools, run_thread
from workers._protocol import ModelRequest, ModelResponse, ToolSpec
from workers._results import submit_result_spec
from workers.providers import OpenAIChatModel
from workers.providers._openai_text_calls import conforms, recognise

FILE_TOOLS = build_tools(["read_file", "list_files", "edit_file"])
SPECS = [t.spec() for t in FILE_TOOLS] + [submit_result_spec()]


@pytest.fixture
async def model(api: FakeChatAPI) -> AsyncIterator[OpenAIChatModel]:
    m = OpenAIChatModel("qwen2.5-coder:1.5b", api.base_url, max_retries=0)
    yield m
    await m.aclose()


def req(tools: list[ToolSpec] = SPECS) -> ModelRequest:
    return ModelRequest(system="s", tools=tools, messages=[NewMessage.user("go")])


async def answer(api: FakeChatAPI, model: OpenAIChatModel, content: Any, **spec: Any) -> Any:
    api.respond_with([{"content": content, **spec}])
    return await model.complete(req())


def calls(reply: ModelResponse) -> list[tuple[str, dict[str, Any]]]:
    return [(b.name, b.input) for b in reply.content if isinstance(b, ToolUseBlock)]


READ_A = {"name": "read_file", "arguments": {"path": "a.py"}}


@pytest.mark.parametrize(
    "content",
    [
        "I'll read it.\n```json\n" + json.dumps(READ_A) + "\n```",
        "```\n" + json.dumps(READ_A, indent=2) + "\n```",
        "```json " + json.dumps(READ_A) + "```",
        json.dumps(READ_A),
        "Let me look at the file.\n" + json.dumps(READ_A),
        '{"name": "read_file", "parameters": {"path": "a.py"}}',
        '{"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}',
        "<tool_call>\n" + json.dumps(READ_A) + "\n</tool_call>",
        json.dumps({"type": "function", "function": READ_A}),
        '<|python_tag|>{"name": "read_file", "parameters": {"path": "a.py"}}',
        "[TOOL_CALLS][" + json.dumps(READ_A) + "]",
    ],
    ids=[
        "fenced",
        "fence-no-lang",
        "fence-one-line",
        "bare",
        "prose-then-bare",
        "parameters",
        "string-args",
        "hermes-tag",
        "api-shape",
        "llama-python-tag",
        "mistral-tool-calls",
    ],
)
async def test_a_tool_call_written_as_text_becomes_a_tool_use_and_the_text_stays(
    api: FakeChatAPI, model: OpenAIChatModel, content: str
) -> None:
    with capture_logs() as logs:
        reply = await answer(api, model, content, finish_reason="stop")
    assert reply.content[0] == TextBlock(text=content)  # what the model wrote, kept
    assert calls(reply) == [("read_file", {"path": "a.py"})]
    assert reply.stop_reason == "tool_use"
    [event] = [e for e in logs if e["event"] == "model.text_tool_calls_recognised"]
    assert event["tools"] == ["read_file"] and event["model"] == "qwen2.5-coder:1.5b"


async def test_a_list_of_calls_gives_one_tool_use_each_with_fresh_unique_ids(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    listed = [READ_A, {"name": "list_files", "arguments": {"pattern": "*.py"}}]
    reply = await answer(api, model, "```json\n" + json.dumps(listed) + "\n```")
    assert calls(reply) == [("read_file", {"path": "a.py"}), ("list_files", {"pattern": "*.py"})]
    ids = [b.id for b in reply.content if isinstance(b, ToolUseBlock)]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('{"name": "delete_repo", "arguments": {}}', "a tool the request does not have"),
        ('{"name": "read_file", "arguments": {}}', "a required key missing"),
        ('{"name": "read_file", "arguments": {"path": 7}}', "a wrong type"),
        ('{"name": "read_file", "arguments": {"path": "a", "mode": "r"}}', "an unknown key"),
        ('{"name": "read_file", "arguments": {"path": "a", "limit": "ten"}}', "a wrong type"),
        ('{"name": "read_file", "arguments": {"path": "a.py"}, "note": 1}', "not a call's shape"),
        ('{"name": "read_file"}', "no arguments at all"),
        ('[{"name": "read_file", "arguments": {"path": "a"}}, 3]', "a list not all calls"),
        ('```python\n{"name": "read_file", "arguments": {"path": "a"}}\n```', "python, not json"),
        ('The call would be `{"name": "read_file", "arguments": {"path": "a"}}`.', "inline"),
        ('```json\n{"name": "read_file", "arguments": {"path": "a"\n```', "broken JSON"),
    ],
)
async def test_text_that_is_not_a_valid_call_of_a_requested_tool_stays_text(
    api: FakeChatAPI, model: OpenAIChatModel, content: str, why: str
) -> None:
    reply = await answer(api, model, content)
    assert reply.content == [TextBlock(text=content)], why
    assert reply.stop_reason == "end_turn"


async def test_a_submit_result_written_as_text_is_recognised_with_its_nested_schema(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    arguments = {
        "status": "done",
        "summary": "fixed",
        "changes": [{"path": "a.py", "action": "modified"}],
        "findings": [{"claim": "off by one", "evidence": []}],
    }
    reply = await answer(api, model, json.dumps({"name": SUBMIT_RESULT, "arguments": arguments}))
    assert calls(reply) == [(SUBMIT_RESULT, arguments)]
    wrong = {**arguments, "changes": [{"path": "a.py", "action": "renamed"}]}  # not in the enum
    reply = await answer(api, model, json.dumps({"name": SUBMIT_RESULT, "arguments": wrong}))
    assert calls(reply) == []


async def test_structured_calls_win_and_the_text_is_not_read_twice(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    reply = await answer(
        api,
        model,
        json.dumps(READ_A),
        tool_calls=[{"name": "list_files", "arguments": {}}],
    )
    assert calls(reply) == [("list_files", {})]


async def test_a_reply_cut_at_the_output_limit_is_not_read_for_calls(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    reply = await answer(api, model, json.dumps(READ_A), finish_reason="length")
    assert calls(reply) == [] and reply.stop_reason == "max_tokens"


async def test_the_flag_switches_recognition_off(api: FakeChatAPI) -> None:
    model = OpenAIChatModel("m", api.base_url, text_tool_calls=False)
    reply = await answer(api, model, json.dumps(READ_A))
    await model.aclose()
    assert reply.content == [TextBlock(text=json.dumps(READ_A))]


async def test_a_request_without_tools_recognises_nothing(
    api: FakeChatAPI, model: OpenAIChatModel
) -> None:
    api.respond_with([{"content": json.dumps(READ_A)}])
    reply = await model.complete(req(tools=[]))
    assert calls(reply) == []


async def test_a_worker_whose_model_writes_every_call_as_text_still_finishes(
    api: FakeChatAPI, model: OpenAIChatModel, store: Store, workspace: Path
) -> None:
    (workspace / "a.py").write_text("x = 1\n")
    submit = {"name": SUBMIT_RESULT, "arguments": {"status": "done", "summary": "x is 1"}}
    api.respond_with(
        [
            {"content": "```json\n" + json.dumps(READ_A) + "\n```"},
            {"content": json.dumps(submit)},
        ]
    )
    info = await store.create_thread(
        kind="worker",
        title="t",
        system_prompt="you are a worker",
        tools=["read_file", "list_files", "edit_file", SUBMIT_RESULT],
        model=model.spec,
        status=Status.QUEUED,
        messages=[NewMessage.user("what is x?")],
    )
    outcome = await run_thread(store, info.id, model=model, tools=FILE_TOOLS, workspace=workspace)
    assert outcome.status == Status.DONE
    assert outcome.result is not None and outcome.result.summary == "x is 1"
    assert outcome.result.status == "done"
    assert api.rejections == []  # the recognised call and its result pair up on the wire
    messages = await store.messages(info.id)
    turn = messages[1]
    [text, use] = turn.content
    assert isinstance(text, TextBlock) and "```json" in text.text  # the transcript shows both
    assert isinstance(use, ToolUseBlock) and use.input == {"path": "a.py"}
    [result] = messages[2].content
    assert isinstance(result, ToolResultBlock) and result.tool_use_id == use.id
    assert "x = 1" in result.text
    sent = api.chat_requests[1]["messages"]
    assert sent[2]["tool_calls"][0]["id"] == use.id and sent[3]["tool_call_id"] == use.id


# --- the schema check itself -------------------------------------------------------------------


def test_conforms_checks_types_required_enums_refs_and_unknown_keys() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["n"],
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": ["number", "null"]},
            "flag": {"type": "boolean"},
            "kind": {"enum": ["a", "b"]},
            "item": {"$ref": "#/$defs/Item"},
            "either": {
                "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
            },
        },
        "$defs": {
            "Item": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}
        },
    }
    assert conforms({"n": 1}, schema)
    assert conforms({"n": 2.0, "x": 1.5, "flag": False, "kind": "b"}, schema)
    assert conforms({"n": 1, "item": {"id": "z", "extra": 1}, "either": ["a"]}, schema)
    assert conforms({"n": 1, "flag": None}, schema)  # null for an optional key: X | None shown as X
    assert not conforms({}, schema)
    assert not conforms({"n": True}, schema)  # a boolean is not an integer
    assert not conforms({"n": 1.5}, schema)
    assert not conforms({"n": 1, "flag": 1}, schema)
    assert not conforms({"n": 1, "kind": "c"}, schema)
    assert not conforms({"n": 1, "item": {}}, schema)
    assert not conforms({"n": 1, "either": [1]}, schema)
    assert not conforms({"n": 1, "other": 0}, schema)
    assert not conforms({"n": 1, "item": {"$ref": "x"}}, {**schema, "$defs": {}})


def test_recognise_reads_only_the_request_tools() -> None:
    tools = [ToolSpec("t", "", {"type": "object", "properties": {}})]
    assert recognise('{"name": "t", "arguments": {}}', tools) == [("t", {})]
    assert recognise('{"name": "u", "arguments": {}}', tools) == []
    assert recognise('{"name": "t", "arguments": {}}', []) == []
    assert recognise("no json here", tools) == []
