"""An imported thread's request (``RequestBuilder(foreign=True)``, ``workers._foreign``): the
source's calls under threadloom's tool names where they mean the same, the others as text; the
stored messages untouched; every request the Messages API's rules accept (the loopback fake's
``validate``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from store import (
    ContentBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.fakes._messages_rules import InvalidRequest, validate
from workers import DEFAULT_WORKER_TOOLS, build_tools
from workers._calls import tool_spec
from workers._request import RequestBuilder
from workers.providers.anthropic import build_params
from workers.providers.openai import build_body

HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
WORKER_SPECS = [tool_spec(t) for t in build_tools(DEFAULT_WORKER_TOOLS)]


def history(*contents: tuple[str, list[ContentBlock]]) -> list[Message]:
    now = datetime.now(UTC)
    return [
        Message(role=role, content=blocks, seq=i + 1, thread_id="01abc", created_at=now)  # type: ignore[arg-type]
        for i, (role, blocks) in enumerate(contents)
    ]


def use(id: str, name: str, **given: Any) -> ToolUseBlock:
    return ToolUseBlock(id=id, name=name, input=given)


def result(id: str, text: str, *, error: bool = False) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=id, content=text, is_error=error)


def request(msgs: list[Message], *, foreign: bool = True, specs: Any = None) -> dict[str, Any]:
    builder = RequestBuilder(
        system="s",
        tools=WORKER_SPECS if specs is None else specs,
        thread_ref="T-01abc",
        max_tokens=100,
        foreign=foreign,
    )
    builder.extend(msgs)
    params = build_params(builder.request(), model="m", max_tokens=100)
    validate(json.loads(json.dumps(params)), HEADERS, context_window=10**6)
    return params


CLAUDE = history(
    ("user", [TextBlock(text="fix it")]),
    (
        "assistant",
        [
            TextBlock(text="Looking."),
            use("toolu_1", "Bash", command="pytest -q", description="run tests", timeout=60000),
            use("toolu_2", "TodoWrite", todos=[{"content": "fix", "status": "pending"}]),
            use("toolu_3", "Read", file_path="src/a.py", offset=10, limit=5),
        ],
    ),
    (
        "user",
        [
            result("toolu_1", "1 failed"),
            result("toolu_2", "Todos updated"),
            result("toolu_3", "a = 1"),
        ],
    ),
    ("assistant", [use("toolu_4", "Edit", file_path="a.py", old_string="1", new_string="2")]),
    ("user", [result("toolu_4", "updated")]),
    ("user", [TextBlock(text="[compaction summary]\nwhat happened so far")]),
    ("assistant", [use("toolu_5", "Bash", command="sleep 100", run_in_background=True)]),
    ("user", [result("toolu_5", "started bash_1", error=True)]),
)


def test_the_sources_calls_are_seen_under_threadloom_names_or_as_text() -> None:
    msgs = request(CLAUDE)["messages"]
    turn = msgs[1]["content"]
    assert turn[1] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "bash",
        "input": {"command": "pytest -q", "timeout_s": 60.0},
    }
    assert turn[2]["type"] == "text"
    assert turn[2]["text"].startswith("[earlier call of TodoWrite, a tool this thread does not")
    assert '"content": "fix"' in turn[2]["text"]
    assert turn[3]["name"] == "read_file"
    assert turn[3]["input"] == {"path": "src/a.py", "offset": 10, "limit": 5}
    # the results kept come first; the text one after them
    answers = msgs[2]["content"]
    assert [b["type"] for b in answers] == ["tool_result", "tool_result", "text"]
    assert [b.get("tool_use_id") for b in answers[:2]] == ["toolu_1", "toolu_3"]
    assert answers[2]["text"].startswith("[TodoWrite result:]\n[T-01abc#3]\nTodos updated")
    assert msgs[3]["content"][0]["input"] == {
        "path": "a.py",
        "old": "1",
        "new": "2",
        "replace_all": False,
    }
    # a result, then a compaction summary: two user messages, one turn for the API
    assert [m["role"] for m in msgs][3:6] == ["assistant", "user", "user"]
    # a command left running in the background is not a bash call: text, its result too
    assert msgs[6]["content"][0]["text"].startswith("[earlier call of Bash,")
    assert msgs[7]["content"][0]["text"].startswith("[Bash result (an error):]")


def test_the_stored_messages_are_not_changed_and_the_prefix_is_the_same_each_time() -> None:
    before = [m.model_dump() for m in CLAUDE]
    first = request(CLAUDE)
    assert [m.model_dump() for m in CLAUDE] == before
    assert json.dumps(request(CLAUDE)) == json.dumps(first)
    builder = RequestBuilder(
        system="s", tools=WORKER_SPECS, thread_ref="T-01abc", max_tokens=100, foreign=True
    )
    builder.extend(CLAUDE)
    once = builder.request()
    builder.reset(CLAUDE)  # a resumed run reads the history again: the same views
    assert list(builder.request().messages) == list(once.messages)


def test_a_native_threads_request_is_as_stored() -> None:
    # without ``foreign`` (a thread threadloom ran from its start) nothing is translated
    msgs = request(CLAUDE, foreign=False)["messages"]
    assert msgs[1]["content"][1]["name"] == "Bash"
    assert msgs[1]["content"][2]["name"] == "TodoWrite"


@pytest.mark.parametrize(
    ("call", "seen"),
    [
        (
            use("c", "shell", command=["bash", "-lc", "ls -la"], workdir="/x"),
            ("bash", {"command": "ls -la"}),
        ),
        (
            use("c", "shell", command=["git", "status"], timeout_ms=5000),
            ("bash", {"command": "git status", "timeout_s": 5.0}),
        ),
        (
            use("c", "exec_command", cmd="rg foo", yield_time_ms=1000, max_output_tokens=100),
            ("bash", {"command": "rg foo"}),
        ),
        (use("c", "exec_command", cmd="python", tty=True), None),
        (use("c", "apply_patch", input="*** Begin Patch\n*** End Patch"), None),
        (use("c", "write_stdin", session_id=3, chars="q"), None),
        (
            use(
                "c",
                "Grep",
                pattern="def f",
                path="src",
                output_mode="content",
                **{"-i": True, "-n": True},
            ),
            ("grep", {"pattern": "(?i)def f", "path": "src"}),
        ),
        (use("c", "Grep", pattern="x", **{"-C": 3}), None),
        (use("c", "Glob", pattern="**/*.py"), ("list_files", {"path": ".", "pattern": "**/*.py"})),
        (use("c", "LS", path="/tmp/p"), ("list_files", {"path": "/tmp/p"})),
        (
            use("c", "Write", file_path="a.txt", content="hi"),
            ("write_file", {"path": "a.txt", "content": "hi"}),
        ),
        (use("c", "MultiEdit", file_path="a.txt", edits=[]), None),
        (use("c", "bash", command="echo native"), ("bash", {"command": "echo native"})),
    ],
)
def test_each_source_tool(call: ToolUseBlock, seen: tuple[str, dict[str, Any]] | None) -> None:
    msgs = request(
        history(
            ("user", [TextBlock(text="go")]),
            ("assistant", [call]),
            ("user", [result("c", "out")]),
        )
    )["messages"]
    block = msgs[1]["content"][0]
    if seen is None:
        assert block["type"] == "text" and block["text"].startswith(
            f"[earlier call of {call.name},"
        )
        (answer,) = msgs[2]["content"]
        assert answer["text"] == f"[{call.name} result:]\n[T-01abc#3]\nout"
    else:
        assert (block["name"], block["input"]) == seen
        assert msgs[2]["content"][0]["type"] == "tool_result"


def test_a_source_tool_whose_counterpart_the_thread_lacks_is_text() -> None:
    specs = [tool_spec(t) for t in build_tools(["read_file"])]
    msgs = request(CLAUDE, specs=specs)["messages"]
    assert msgs[1]["content"][1]["type"] == "text"  # Bash: the thread has no bash
    assert msgs[1]["content"][3]["name"] == "read_file"


def test_the_openai_chat_body_pairs_every_call_kept_with_its_answer() -> None:
    builder = RequestBuilder(
        system="s", tools=WORKER_SPECS, thread_ref="T-01abc", max_tokens=100, foreign=True
    )
    builder.extend(CLAUDE)
    body = build_body(builder.request(), model="m", max_tokens=100)
    calls = [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    assert calls == answered == ["toolu_1", "toolu_3", "toolu_4"]
    assert {c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []} <= {
        "bash",
        "read_file",
        "edit_file",
    }


def test_the_fake_refuses_what_the_api_refuses() -> None:
    base: dict[str, Any] = {"model": "m", "max_tokens": 10}
    pair = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    ]
    with pytest.raises(InvalidRequest, match="must define tools"):
        validate({**base, "messages": pair}, HEADERS, context_window=10**6)
    tools = [{"name": "bash", "input_schema": {"type": "object"}}]
    validate({**base, "tools": tools, "messages": pair}, HEADERS, context_window=10**6)
    # two user messages in a row are one turn, as the API combines them: the result must
    # still come first in it
    then = [*pair, {"role": "user", "content": "and then"}]
    validate({**base, "tools": tools, "messages": then}, HEADERS, context_window=10**6)
    late = [*pair[:2], {"role": "user", "content": "first"}, pair[2]]
    with pytest.raises(InvalidRequest, match="must come first"):
        validate({**base, "tools": tools, "messages": late}, HEADERS, context_window=10**6)
    with pytest.raises(InvalidRequest, match="without `tool_result`"):
        validate({**base, "tools": tools, "messages": pair[:2]}, HEADERS, context_window=10**6)
