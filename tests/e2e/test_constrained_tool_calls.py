"""Constrained tool calls (``tool_calls = "constrained" | "auto"``) end to end: the real
``threadloom`` command against the loopback fake OpenAI-compatible server, whose scripted
"small model" answers in prose unless its reply is constrained by a ``json_schema`` response
format — then it writes the call the schema allows (what llama.cpp's grammar does)."""

from __future__ import annotations

import re
from typing import Any

from tests.e2e.conftest import Env
from tests.e2e.test_model_knobs import who
from tests.fakes._server import RecordedRequest
from tests.fakes.chat_api import FakeChatAPI

TASKS = [{"id": "a", "title": "A", "prompt": "run the tests and report the counts"}]
_LABEL = re.compile(r"\[(T-[0-9a-z]+#\d+)\]")


def small_model(request: dict[str, Any]) -> dict[str, Any]:
    """The lead reports; the worker claims results in prose, or (constrained) runs ``bash`` and
    submits what it printed, citing its ref. The provider's probe (no tools) gets ``{}``."""
    if not request.get("tools"):
        return {"content": "{}", "json": {}}
    if who(request) == "lead":
        return {"content": "the report"}
    last = request["messages"][-1]
    if last["role"] == "tool" and "3 passed" in last["content"]:
        evidence = _LABEL.findall(last["content"])[:1]
        result = {
            "status": "done",
            "summary": "3 passed",
            "findings": [{"claim": "3 tests passed", "evidence": evidence}],
        }
        return {"content": "All done.", "json": {"name": "submit_result", "arguments": result}}
    return {
        "content": "All the tests passed.",  # a result it never ran: what the 0.5B model did
        "json": {"name": "bash", "arguments": {"command": "echo 3 passed"}},
    }


def job(env: Env, api: FakeChatAPI, name: str, extra: str = "") -> Any:
    return env.job(name, [], TASKS, model=f"openai:m@{api.base_url}", extra=extra)


def chat(api: FakeChatAPI) -> list[RecordedRequest]:
    return [r for r in api.requests if r.path.endswith("/chat/completions")]


def schema_names(request: dict[str, Any]) -> list[str]:
    schema = request["response_format"]["json_schema"]["schema"]
    return [v["properties"]["name"]["const"] for v in schema["anyOf"]]


def test_constrained_worker_turns_carry_the_threads_tools_and_end_through_submit_result(
    env: Env,
) -> None:
    with FakeChatAPI() as api:
        api.respond_with(small_model)
        res = env.run("--json", "run", str(job(env, api, "c", 'tool_calls = "constrained"')))
        assert res.code == 0, res.stderr
        worker = res.json["workers"][0]
        requests = [r.json for r in chat(api)]
        raw = [r.body for r in chat(api) if who(r.json) == "worker"]
        before = len(chat(api))
        resumed = env.run("--json", "resume", worker["ref"], "Look again.")
        assert resumed.code == 0, resumed.stderr
        again = [r for r in chat(api)[before:] if who(r.json) == "worker"]
    assert worker["summary"] == "3 passed", worker
    workers = [r for r in requests if who(r) == "worker"]
    assert len(workers) == 2  # bash, then submit_result: no prose turn, no nudge
    tools = [t["function"]["name"] for t in workers[0]["tools"]]
    assert "submit_result" in tools and all(r["tools"] == workers[0]["tools"] for r in workers)
    # each turn constrained to the thread's own tools; no submit_result before a first call
    assert schema_names(workers[0]) == [t for t in tools if t != "submit_result"]
    assert schema_names(workers[1]) == tools
    assert all("response_format" not in r for r in requests if who(r) == "lead")
    assert "Tool use, step by step" in workers[0]["messages"][0]["content"]  # the worker's system
    # the transcript holds the call as a native one gives it: a tool call, no text
    assistant = [m for m in workers[1]["messages"] if m["role"] == "assistant"]
    assert assistant[-1]["content"] is None
    assert assistant[-1]["tool_calls"][0]["function"]["name"] == "bash"
    assert '"command": "echo 3 passed"' in assistant[-1]["tool_calls"][0]["function"]["arguments"]
    # a resumed worker, in a new process, sends the same bytes for the prefix it shares
    first = again[0]
    assert "response_format" in first.json
    end = raw[-1].index(b'],"max_tokens"')
    assert first.body.startswith(raw[-1][:end]), "the resumed request's prefix differs"
    assert first.json["response_format"] == workers[-1]["response_format"]
    assert first.json["tools"] == workers[-1]["tools"]


def test_native_by_default_sends_no_response_format(env: Env) -> None:
    with FakeChatAPI() as api:
        api.respond_with(small_model)
        res = env.run("--json", "run", str(job(env, api, "n")))
        requests = [r.json for r in chat(api)]
    assert res.code == 0, res.stderr
    assert all("response_format" not in r for r in requests)
    # the unconstrained small model never runs anything: nudged once, it ends partial
    assert res.json["workers"][0]["summary"] == "All the tests passed.", res.json["workers"]


def test_auto_keeps_native_calls_first_and_constrains_after_a_turn_without_one(
    env: Env,
) -> None:
    with FakeChatAPI() as api:
        api.respond_with(small_model)
        res = env.run("--json", "run", str(job(env, api, "auto", 'tool_calls = "auto"')))
        requests = [r.json for r in chat(api)]
    assert res.code == 0, res.stderr
    assert res.json["workers"][0]["summary"] == "3 passed", res.json["workers"]
    probes = [r for r in requests if not r.get("tools")]
    assert len(probes) == 1 and probes[0]["response_format"]["type"] == "json_schema"
    workers = [r for r in requests if r not in probes and who(r) == "worker"]
    # turn 1 native (it answered prose), turn 2 after the nudge constrained: bash, submit
    assert ["response_format" in r for r in workers] == [False, True, True]


def test_auto_stays_native_where_the_endpoint_refuses_a_json_schema(env: Env) -> None:
    with FakeChatAPI(json_schema=False) as api:
        api.respond_with(small_model)
        res = env.run("--json", "run", str(job(env, api, "refused", 'tool_calls = "auto"')))
        requests = [r.json for r in chat(api)]
        refused = [r for r in api.rejections]
    assert res.code == 0, res.stderr
    assert len(refused) == 1  # the probe, asked once; no turn of the job was refused
    assert [r for r in requests if "response_format" in r and r.get("tools")] == []
    assert res.json["workers"][0]["summary"] == "All the tests passed.", res.json["workers"]


def test_a_bad_tool_calls_value_is_exit_2_naming_the_key(env: Env) -> None:
    with FakeChatAPI() as api:
        res = env.run("run", str(job(env, api, "bad", 'tool_calls = "grammar"')))
        sent = len(chat(api))
    assert res.code == 2, res.stderr
    assert "tool_calls" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert sent == 0
