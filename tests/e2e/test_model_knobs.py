"""The model-call knobs end to end: ``max_output_tokens`` and ``request_timeout_s`` (and their
``run`` flags) reach the request each provider sends — for the lead, its workers, its readers,
and a resumed or forked thread of the job — through the real ``threadloom`` command and the
loopback fake APIs."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from orchestrator import Orchestrator, parse_job
from store import NewMessage, Store
from tests.e2e.conftest import Env, db_read, submit
from tests.fakes.chat_api import FakeChatAPI
from tests.fakes.messages_api import FakeMessagesAPI, scripted_responder
from workers import Model, make_model

TASKS = [{"id": "a", "title": "A", "prompt": "look at a"}]


def first_user_text(request: dict[str, Any]) -> str:
    for message in request["messages"]:
        if message["role"] == "user":
            content = message["content"]
            if isinstance(content, list):
                return "".join(b.get("text", "") for b in content if isinstance(b, dict))
            return str(content)
    return ""


def who(request: dict[str, Any]) -> str:
    """Which thread sent a request, by its first user message (SPEC: each kind's opening)."""
    text = first_user_text(request)
    if text.startswith("Job: "):
        return "lead"
    if text.startswith("Task a:"):
        return "worker"
    if text.startswith("Thread to read:"):
        return "reader"
    raise AssertionError(f"a request from an unknown thread: {text[:80]!r}")


def chat_responder(request: dict[str, Any]) -> dict[str, Any]:
    """The lead asks a reader about its worker once, then reports; the worker submits; the
    reader answers in text."""
    kind = who(request)
    if kind == "worker":
        call = submit("a looked at")["tool_calls"][0]
        return {"tool_calls": [{"name": call["name"], "arguments": call["input"]}]}
    if kind == "reader":
        return {"content": "The worker looked at a and submitted."}
    tool_results = [m for m in request["messages"] if m["role"] == "tool"]
    if len(tool_results) == 1 and request["messages"][-1]["role"] == "tool":
        found = re.search(r"T-[0-9A-Za-z]{6,}", tool_results[0]["content"])
        assert found, tool_results[0]["content"]
        question = {"ref": found.group(0), "question": "What did the worker do?"}
        return {"tool_calls": [{"name": "ask_thread", "arguments": question}]}
    return {"content": "the report"}


def openai_job(env: Env, api: FakeChatAPI, name: str, *, extra: str = "", worker: str = "") -> Path:
    return env.job(name, [], TASKS, model=f"openai:m@{api.base_url}", extra=extra, worker=worker)


def max_tokens_by_thread(requests: list[dict[str, Any]]) -> dict[str, set[int]]:
    seen: dict[str, set[int]] = {}
    for request in requests:
        seen.setdefault(who(request), set()).add(request["max_tokens"])
    return seen


def test_openai_requests_ask_for_the_configured_max_tokens_in_every_thread_of_the_job(
    env: Env,
) -> None:
    with FakeChatAPI() as api:
        api.respond_with(chat_responder)
        job = openai_job(
            env, api, "knobs", extra="max_output_tokens = 1234", worker="max_output_tokens = 321"
        )
        res = env.run("--json", "run", str(job))
        assert res.code == 0, res.stderr
        assert max_tokens_by_thread(api.chat_requests) == {
            "lead": {1234},
            "worker": {321},
            "reader": {321},  # a reader runs on the workers' model, with the workers' knobs
        }
        # a resumed worker and a forked lead, in new processes, keep the job's knobs
        worker_ref, lead_ref = res.json["workers"][0]["ref"], res.json["lead"]
        before = len(api.chat_requests)
        resumed = env.run("--json", "resume", worker_ref, "Look again.")
        assert resumed.code == 0, resumed.stderr
        forked = env.run("--json", "fork", lead_ref, "Report again.")
        assert forked.code == 0, forked.stderr
        later = max_tokens_by_thread(api.chat_requests[before:])
    assert later == {"worker": {321}, "lead": {1234}}


def test_the_max_output_tokens_flag_overrides_the_job_files_value(env: Env) -> None:
    with FakeChatAPI() as api:
        api.respond_with(chat_responder)
        job = openai_job(env, api, "flagged", extra="max_output_tokens = 1234")
        res = env.run("--json", "run", str(job), "--max-output-tokens", "77")
        requests = list(api.chat_requests)
    assert res.code == 0, res.stderr
    # the workers have no value of their own: they follow the job's, which the flag set
    assert max_tokens_by_thread(requests) == {"lead": {77}, "worker": {77}, "reader": {77}}


def test_request_timeout_cuts_a_slow_answer_and_the_run_exits_4(env: Env) -> None:
    with FakeChatAPI() as api:
        # every attempt would take a minute; the subprocess gets 50 s in all, so only a cut
        # request (and its retries, cut too) ends the run in time — the default (300 s or more)
        # would not
        api.inject("slow", times=20, delay_s=60)
        job = env.job("slow", [], model=f"openai:m@{api.base_url}")
        res = env.run("--json", "run", str(job), "--request-timeout", "0.2", timeout=50)
        attempts = len(api.chat_requests)
    assert res.code == 4, (res.code, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("threadloom: error: "), res.stderr
    assert re.search(r"timed out|timeout", lines[-1]), lines[-1]
    assert res.json["error"]["code"] == 4
    assert attempts >= 1  # every attempt was cut: the provider's retry policy says how many


def test_a_bad_knob_flag_is_exit_2_naming_the_flag(env: Env) -> None:
    job = env.job("bad", [{"match": ".", "turns": [{"text": "x"}]}])
    for flag, value in (("--max-output-tokens", "0"), ("--request-timeout", "-1")):
        res = env.run("run", str(job), flag, value)
        assert res.code == 2, res.stderr
        assert flag in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    res = env.run("run", str(job), "--request-timeout", "inf")
    assert res.code == 2 and res.stderr.count("--request-timeout") == 1, res.stderr


def anthropic_run(env: Env, name: str, *, extra: str = "", worker: str = "") -> dict[str, Any]:
    script = {
        "rules": [
            {"match": f"Job: {name}", "turns": [{"text": "reported"}]},
            {"match": "(?m)^Task a:", "turns": [submit("a looked at")]},
        ]
    }
    with FakeMessagesAPI() as api:
        api.respond_with(scripted_responder(script))
        job = env.job(
            name, [], TASKS, model="anthropic:claude-haiku-4-5", extra=extra, worker=worker
        )
        res = env.run(
            "--json",
            "run",
            str(job),
            env={"ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": "sk-ant-test"},
        )
        assert res.code == 0, res.stderr
        assert api.rejections == []
        return max_tokens_by_thread(api.message_requests)


def test_anthropic_requests_carry_the_configured_max_tokens(env: Env) -> None:
    seen = anthropic_run(
        env,
        "anth",
        extra="max_output_tokens = 2048",
        worker="max_output_tokens = 1024\nrequest_timeout_s = 30",
    )
    assert seen == {"lead": {2048}, "worker": {1024}}


def test_anthropic_requests_without_knobs_ask_for_the_default_8192(env: Env) -> None:
    assert anthropic_run(env, "plain") == {"lead": {8192}, "worker": {8192}}


def test_the_scripted_model_ignores_the_knobs(env: Env) -> None:
    rules = [
        {"match": "Job: offline", "turns": [{"text": "reported"}]},
        {"match": "(?m)^Task a:", "turns": [submit("a looked at")]},
    ]
    job = env.job(
        "offline",
        rules,
        TASKS,
        extra="max_output_tokens = 1\nrequest_timeout_s = 0.001",
        worker="max_output_tokens = 1",
    )
    res = env.run("--json", "run", str(job))
    assert res.code == 0, res.stderr
    assert res.json["report"] == "reported"


async def test_anthropic_request_timeout_reaches_the_sdk_through_the_model_factory(
    tmp_path: Path,
) -> None:
    """The runtime hands the job's knobs to the model factory as ``max_tokens``/``timeout``;
    the real ``AnthropicModel`` built from them cuts a slow answer instead of waiting for it."""
    (tmp_path / "ws").mkdir()
    text = (
        '[job]\nname = "slow"\ngoal = "g"\nworkspace = "ws"\n'
        'model = "anthropic:claude-haiku-4-5"\nrequest_timeout_s = 0.2\nmax_output_tokens = 99\n'
    )
    spec = parse_job(text, name="slow.toml", base_dir=tmp_path)
    given: list[dict[str, Any]] = []

    def factory(model_spec: str, **options: Any) -> Model:
        given.append(options)
        # quick backoff, so the four retries of a cut attempt take no time of their own
        return make_model(
            model_spec,
            api_key="sk-ant-test",
            base_url=api.base_url,
            backoff_base=0.001,
            backoff_cap=0.01,
            **options,
        )

    store = await Store.open(str(tmp_path / "threads.db"))
    try:
        with FakeMessagesAPI() as api:
            api.inject("slow", times=10, delay_s=60)
            async with asyncio.timeout(30):  # five uncut attempts would take five minutes
                outcome = await Orchestrator(store, model_factory=factory).run_job(spec)
            sent = [r.json for r in api.requests]
    finally:
        await store.close()
    assert given == [{"max_tokens": 99, "timeout": 0.2}]
    assert outcome.provider_failed and "timed out" in (outcome.error or ""), outcome.error
    assert len(sent) == 5 and {r["max_tokens"] for r in sent} == {99}


# ----------------------------------------------------------------- a run of a thread that exists


def loose_thread(env: Env, model: str) -> str:
    """A thread outside any job (as an imported session is), on ``model``: its ref."""

    async def make(store: Store) -> str:
        info = await store.create_thread(
            kind="worker", title="loose", model=model, messages=[NewMessage.user("Look around.")]
        )
        return info.ref

    return str(db_read(env, make))


def test_resume_and_fork_flags_set_this_runs_knobs_over_the_jobs_and_the_workers(
    env: Env,
) -> None:
    """``[job.worker] max_output_tokens = 321`` is the worker's; ``resume --max-output-tokens``
    and ``fork --max-output-tokens`` replace it for their run, and a later plain resume is
    back to the job's."""
    with FakeChatAPI() as api:
        api.respond_with(chat_responder)
        job = openai_job(env, api, "again", worker="max_output_tokens = 321")
        ran = env.run("--json", "run", str(job))
        assert ran.code == 0, ran.stderr
        worker = ran.json["workers"][0]["ref"]
        runs = [("resume", worker, "Look again.", "--max-output-tokens", "77")]
        runs += [("fork", f"{worker}#1", "Look elsewhere.", "--max-output-tokens", "55")]
        runs += [("resume", worker, "Once more.")]
        seen = []
        for args in runs:
            before = len(api.chat_requests)
            res = env.run("--json", *args)
            assert res.code == 0, (args, res.stderr)
            seen.append(max_tokens_by_thread(api.chat_requests[before:]))
    assert seen == [{"worker": {77}}, {"worker": {55}}, {"worker": {321}}]


def test_resume_of_a_thread_outside_any_job_takes_the_request_timeout_flag(env: Env) -> None:
    """A thread outside any job has no job file to say ``request_timeout_s`` in: the flag cuts
    a slow answer (the provider's default, 300 s, would outlast the subprocess's 50)."""
    with FakeChatAPI() as api:
        ref = loose_thread(env, f"openai:m@{api.base_url}")
        api.inject("slow", times=20, delay_s=60)
        res = env.run("--json", "resume", ref, "Go on.", "--request-timeout", "0.2", timeout=50)
    assert res.code == 4, (res.code, res.stderr)
    assert re.search(r"timed out|timeout", res.stderr.strip().splitlines()[-1]), res.stderr


def test_run_knob_flags_of_resume_and_fork_are_refused_when_bad_or_idle(env: Env) -> None:
    ref = loose_thread(env, "openai:m@http://127.0.0.1:9/v1")
    for args in (
        ("resume", ref, "Go on.", "--request-timeout", "0"),
        ("fork", ref, "Go on.", "--max-output-tokens", "0"),
        ("fork", ref, "Go on.", "--no-run", "--request-timeout", "5"),
    ):
        res = env.run(*args)
        assert res.code == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert args[-2] in lines[-1] and len(lines) == 1, res.stderr
    threads = db_read(env, lambda s: s.list_threads())
    assert [(t.ref, t.head_seq) for t in threads] == [(ref, 1)]  # nothing stored by a refusal
