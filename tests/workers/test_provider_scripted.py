"""The scripted model follows SPEC §Scripted model rule by rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from store import NewMessage, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from workers._protocol import ORCHESTRATOR_TOOL_ID_PREFIX, ModelRequest
from workers.errors import ScriptError
from workers.providers import NO_TURN_LEFT, ScriptedModel

SCRIPT: dict[str, Any] = {
    "rules": [
        {
            "match": r"fix the (\w+) tests",
            "turns": [
                {"text": "Looking.", "tool_calls": [{"name": "read_file", "input": {"path": "a"}}]},
                {"tool_calls": [{"name": "bash", "input": {"command": "pytest"}}]},
                {"text": "Fixed in {{thread}}."},
            ],
        },
        {"match": "fix", "turns": [{"text": "second rule"}]},
        {
            "match": "review",
            "turns": [
                {
                    "text": "Worker {{ref:tok}} and {{ref:par}}",
                    "tool_calls": [
                        {
                            "name": "read_thread",
                            "input": {
                                "ref": "{{ref:tok}}",
                                "nested": [{"deep": "see {{ref:par}} from {{thread}}"}, 3, None],
                            },
                        }
                    ],
                }
            ],
        },
        {"match": "usage", "turns": [{"text": "counted", "usage": {"input_tokens": 7}}]},
        {"match": "silent", "turns": [{}]},
    ]
}


def user(text: str) -> NewMessage:
    return NewMessage.user(text)


def assistant_tool(call_id: str, name: str = "read_file") -> NewMessage:
    return NewMessage(role="assistant", content=[ToolUseBlock(id=call_id, name=name, input={})])


def results(*ids: str, text: str | None = None) -> NewMessage:
    blocks: list[Any] = [ToolResultBlock(tool_use_id=i, content="out") for i in ids]
    if text is not None:
        blocks.append(TextBlock(text=text))
    return NewMessage(role="user", content=blocks)


def request(*messages: NewMessage, thread: str = "T-0001abcd", **kw: Any) -> ModelRequest:
    return ModelRequest(system="sys", tools=[], messages=list(messages), thread_ref=thread, **kw)


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel(SCRIPT)


async def test_first_matching_rule_answers_its_turn_zero(model: ScriptedModel) -> None:
    reply = await model.complete(request(user("please fix the parser tests")))
    assert reply.stop_reason == "tool_use"
    assert isinstance(reply.content[0], TextBlock)
    assert reply.content[0].text == "Looking."
    call = reply.content[1]
    assert isinstance(call, ToolUseBlock)
    assert (call.name, call.input) == ("read_file", {"path": "a"})


async def test_rules_are_tried_in_order_and_regex_is_searched_not_matched(
    model: ScriptedModel,
) -> None:
    reply = await model.complete(request(user("could you fix it")))
    assert reply.content == [TextBlock(text="second rule")]
    assert reply.stop_reason == "end_turn"


async def test_k_counts_assistant_messages_after_the_prompt(model: ScriptedModel) -> None:
    msgs = [user("fix the parser tests"), assistant_tool("toolu_1"), results("toolu_1")]
    reply = await model.complete(request(*msgs))
    assert isinstance(reply.content[0], ToolUseBlock)
    assert reply.content[0].name == "bash"
    msgs += [assistant_tool("toolu_2", "bash"), results("toolu_2")]
    reply = await model.complete(request(*msgs))
    assert reply.content == [TextBlock(text="Fixed in T-0001abcd.")]


async def test_user_message_of_only_tool_results_is_not_the_prompt(model: ScriptedModel) -> None:
    # The newest user message holds only tool results: the prompt is the earlier text message.
    msgs = [user("fix the parser tests"), assistant_tool("toolu_1"), results("toolu_1")]
    reply = await model.complete(request(*msgs))
    assert isinstance(reply.content[0], ToolUseBlock)
    assert reply.content[0].name == "bash"


async def test_user_message_with_tool_results_and_text_is_the_prompt(
    model: ScriptedModel,
) -> None:
    msgs = [
        user("fix the parser tests"),
        assistant_tool("toolu_1"),
        results("toolu_1", text="now please review"),
    ]
    refs = {"tok": "T-tok", "par": "T-par"}

    async def resolve(task_id: str) -> str | None:
        return refs.get(task_id)

    reply = await model.complete(request(*msgs, resolve_task_ref=resolve))
    assert isinstance(reply.content[0], TextBlock)
    assert reply.content[0].text == "Worker T-tok and T-par"


async def test_orchestrator_written_assistant_turn_is_not_counted(model: ScriptedModel) -> None:
    dispatch_id = ORCHESTRATOR_TOOL_ID_PREFIX + "abc"
    msgs = [
        user("fix the parser tests"),
        assistant_tool(dispatch_id, "dispatch"),
        results(dispatch_id),
    ]
    reply = await model.complete(request(*msgs))
    assert isinstance(reply.content[0], TextBlock)
    assert reply.content[0].text == "Looking."


async def test_assistant_turn_mixing_orchestrator_and_model_ids_is_counted(
    model: ScriptedModel,
) -> None:
    mixed = NewMessage(
        role="assistant",
        content=[
            ToolUseBlock(id=ORCHESTRATOR_TOOL_ID_PREFIX + "a", name="dispatch"),
            ToolUseBlock(id="toolu_model", name="read_file"),
        ],
    )
    msgs = [
        user("fix the parser tests"),
        mixed,
        results(ORCHESTRATOR_TOOL_ID_PREFIX + "a", "toolu_model"),
    ]
    reply = await model.complete(request(*msgs))
    assert isinstance(reply.content[0], ToolUseBlock)
    assert reply.content[0].name == "bash"


async def test_assistant_text_turn_without_tool_uses_is_counted(model: ScriptedModel) -> None:
    msgs = [user("could you fix it"), NewMessage.assistant("second rule")]
    reply = await model.complete(request(*msgs))
    assert reply.content == [TextBlock(text=NO_TURN_LEFT)]


async def test_no_turn_left_answers_the_marker_and_ends_the_turn(model: ScriptedModel) -> None:
    msgs = [user("could you fix it"), NewMessage.assistant("second rule"), user("fix more")]
    reply = await model.complete(request(*msgs))
    assert reply.content == [TextBlock(text="second rule")]  # a new prompt restarts at turn 0
    msgs = [user("could you fix it"), assistant_tool("toolu_x"), results("toolu_x")]
    reply = await model.complete(request(*msgs))
    assert reply.content == [TextBlock(text=NO_TURN_LEFT)]
    assert reply.stop_reason == "end_turn"


async def test_no_matching_rule_is_an_error_naming_the_text(model: ScriptedModel) -> None:
    with pytest.raises(ScriptError, match="no rule matches 'hello there'"):
        await model.complete(request(user("hello there")))
    long = "x" * 500
    with pytest.raises(ScriptError) as info:
        await model.complete(request(user(long)))
    assert "xxxx…" in str(info.value)
    assert len(str(info.value)) < 300


async def test_request_without_user_text_is_an_error(model: ScriptedModel) -> None:
    with pytest.raises(ScriptError, match="no user message with text"):
        await model.complete(request(results("toolu_orphan")))


async def test_placeholders_are_filled_recursively_in_tool_inputs(model: ScriptedModel) -> None:
    asked: list[str] = []

    async def resolve(task_id: str) -> str | None:
        asked.append(task_id)
        return {"tok": "T-01tok", "par": "T-01par"}.get(task_id)

    reply = await model.complete(request(user("review"), thread="T-lead", resolve_task_ref=resolve))
    call = reply.content[1]
    assert isinstance(call, ToolUseBlock)
    assert call.input == {
        "ref": "T-01tok",
        "nested": [{"deep": "see T-01par from T-lead"}, 3, None],
    }
    assert sorted(asked) == ["par", "tok"]  # each id resolved once


async def test_unknown_task_id_is_an_error_naming_it(model: ScriptedModel) -> None:
    async def resolve(task_id: str) -> str | None:
        return "T-01tok" if task_id == "tok" else None

    with pytest.raises(ScriptError, match="unknown task id 'par'"):
        await model.complete(request(user("review"), resolve_task_ref=resolve))
    with pytest.raises(ScriptError, match="unknown task id 'tok'"):
        await model.complete(request(user("review")))  # no resolver at all


async def test_tool_ids_are_deterministic_per_request(model: ScriptedModel) -> None:
    first = await model.complete(request(user("fix the parser tests")))
    again = await model.complete(request(user("fix the parser tests")))
    assert first == again
    other_thread = await model.complete(request(user("fix the parser tests"), thread="T-other"))
    ids = {b.id for r in (first, other_thread) for b in r.content if isinstance(b, ToolUseBlock)}
    assert len(ids) == 2
    assert all(i.startswith("toolu_s_") for i in ids)


async def test_same_request_rebuilt_gets_same_answer_from_a_fresh_model(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    msgs = [user("fix the parser tests"), assistant_tool("toolu_1"), results("toolu_1")]
    one = await ScriptedModel(path).complete(request(*msgs))
    rebuilt = [NewMessage.model_validate(m.model_dump()) for m in msgs]
    two = await ScriptedModel(str(path)).complete(request(*rebuilt))
    assert one == two


async def test_usage_is_the_turns_or_estimated_from_request_and_reply(
    model: ScriptedModel,
) -> None:
    given = await model.complete(request(user("usage")))
    assert given.usage == Usage(input_tokens=7)
    small = await model.complete(request(user("could you fix it")))
    big = await model.complete(request(user("could you fix it " + "y" * 4000)))
    assert small.usage.input_tokens > 0
    assert small.usage.output_tokens > 0
    assert big.usage.input_tokens >= small.usage.input_tokens + 1000


async def test_turn_without_text_or_calls_answers_one_empty_text_block(
    model: ScriptedModel,
) -> None:
    reply = await model.complete(request(user("silent")))
    assert reply.content == [TextBlock(text="")]
    assert reply.stop_reason == "end_turn"


def test_spec_and_cost(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"rules": []}')
    model = ScriptedModel(str(path))
    assert model.spec == f"scripted:{path}"
    assert model.cost_usd(Usage(input_tokens=10**6, output_tokens=10**6)) == 0.0


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ([], "top level"),
        ({"rules": {}}, "rules: expected a list"),
        ({"rules": [], "extra": 1}, "unknown key 'extra'"),
        ({"rules": [{"match": "a", "turns": [], "when": 1}]}, "rules[0]: unknown key 'when'"),
        ({"rules": [{"turns": []}]}, "rules[0].match"),
        ({"rules": [{"match": "(", "turns": []}]}, "rules[0].match: bad regular expression"),
        (
            {"rules": [{"match": "a", "turns": []}, {"match": "b", "turns": [{"txt": "x"}]}]},
            "rules[1].turns[0]: unknown key 'txt'",
        ),
        ({"rules": [{"match": "a", "turns": [{"text": 3}]}]}, "rules[0].turns[0].text"),
        (
            {"rules": [{"match": "a", "turns": [{"tool_calls": [{"input": {}}]}]}]},
            "rules[0].turns[0].tool_calls[0].name",
        ),
        (
            {"rules": [{"match": "a", "turns": [{"tool_calls": [{"name": "x", "args": {}}]}]}]},
            "rules[0].turns[0].tool_calls[0]: unknown key 'args'",
        ),
        (
            {"rules": [{"match": "a", "turns": [{"usage": {"input_tokens": -1}}]}]},
            "rules[0].turns[0].usage.input_tokens",
        ),
        (
            {"rules": [{"match": "a", "turns": [{"usage": {"tokens": 1}}]}]},
            "rules[0].turns[0].usage: unknown key 'tokens'",
        ),
    ],
)
def test_malformed_script_is_refused_at_load_naming_file_and_place(
    tmp_path: Path, script: Any, expected: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(script))
    with pytest.raises(ScriptError) as info:
        ScriptedModel(path)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_file_that_is_not_json_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"rules": [\n  {"match": "a",}\n]}')
    with pytest.raises(ScriptError, match=r"broken\.json: not valid JSON: .*line 2"):
        ScriptedModel(path)


def test_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match=r"nope\.json: cannot read"):
        ScriptedModel(tmp_path / "nope.json")
