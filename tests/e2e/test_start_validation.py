"""A run that cannot start stores nothing (exit 2, one line naming the model or file); a job
whose workers all failed is not ``done``."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import Env, submit


def _threads(env: Env) -> list[dict[str, object]]:
    if not env.db.exists():
        return []
    return env.run("--json", "ls").json  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("script", "needle"),
    [
        pytest.param(None, "missing.json", id="missing-file"),
        pytest.param("", "script.json", id="empty-file"),
        pytest.param("{not json", "script.json", id="invalid-json"),
        pytest.param('{"rules": [{"match": "(", "turns": []}]}', "(", id="bad-regex"),
    ],
)
def test_a_bad_scripted_model_file_is_exit_2_and_stores_nothing(
    env: Env, script: str | None, needle: str
) -> None:
    job = env.job(
        "start", [{"match": "x", "turns": []}], [{"id": "a", "title": "A", "prompt": "p"}]
    )
    if script is None:
        model = "scripted:missing.json"
    else:
        (env.root / "script.json").write_text(script)
        model = "scripted:script.json"
    res = env.run("run", str(job), "--model", model)
    assert res.code == 2, res.stderr
    assert needle in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert _threads(env) == []  # no lead left queued forever


def test_an_anthropic_worker_model_without_a_key_is_exit_2_and_stores_nothing(env: Env) -> None:
    job = env.job(
        "nokey",
        [{"match": "Job: nokey", "turns": [{"text": "done"}]}],
        [{"id": "a", "title": "A", "prompt": "p"}],
    )
    res = env.run("run", str(job), "--worker-model", "anthropic:claude-haiku-4-5")
    assert res.code == 2, res.stderr
    assert "ANTHROPIC_API_KEY" in res.stderr
    assert _threads(env) == []


def test_a_malformed_worker_model_is_exit_2_even_without_tasks(env: Env) -> None:
    job = env.job("plan", [{"match": "Job: plan", "turns": [{"text": "nothing to do"}]}], [])
    res = env.run("run", str(job), "--worker-model", "openai:x")
    assert res.code == 2, res.stderr
    assert "openai:x" in res.stderr
    assert _threads(env) == []


def test_a_job_whose_workers_all_failed_is_not_done(env: Env) -> None:
    job = env.job(
        "allfail",
        [
            {"match": "Job: allfail", "turns": [{"text": "the report"}]},
            # each worker's reply names a task that does not exist: the scripted model fails it
            {"match": "(?m)^Task ", "turns": [{"text": "{{ref:nope}}"}]},
        ],
        [{"id": "a", "title": "A", "prompt": "p"}, {"id": "b", "title": "B", "prompt": "q"}],
    )
    res = env.run("--json", "run", str(job))
    assert res.code == 1, res.stderr
    doc = res.json
    assert [w["status"] for w in doc["workers"]] == ["failed", "failed"]
    assert doc["status"] == "failed"
    assert "every worker failed" in doc["error"]["message"]


def test_a_job_with_one_worker_done_is_done(env: Env) -> None:
    job = env.job(
        "onefail",
        [
            {"match": "Job: onefail", "turns": [{"text": "the report"}]},
            {"match": "(?m)^Task a:", "turns": [submit("fine")]},
            {"match": "(?m)^Task b:", "turns": [{"text": "{{ref:nope}}"}]},
        ],
        [{"id": "a", "title": "A", "prompt": "p"}, {"id": "b", "title": "B", "prompt": "q"}],
    )
    res = env.run("--json", "run", str(job))
    assert res.code == 0, res.stderr
    assert sorted(w["status"] for w in res.json["workers"]) == ["done", "failed"]
    assert json.dumps(res.json["status"]) == '"done"'


def test_a_crash_is_one_line_on_the_console_and_the_traceback_is_in_the_job_log(
    env: Env,
) -> None:
    # a worker whose message matches no rule: the scripted model raises, the thread crashes
    job = env.job(
        "crash",
        [{"match": "Job: crash", "turns": [{"text": "report"}]}],
        [{"id": "a", "title": "A", "prompt": "p"}],
    )
    res = env.run("run", str(job))
    assert "Traceback" not in res.stderr, res.stderr
    crashed = [ln for ln in res.stderr.splitlines() if "thread.crashed" in ln]
    assert len(crashed) == 1, res.stderr
    assert len(res.stderr.splitlines()) < 15, res.stderr
    assert "the traceback is in" in res.stderr
    logs = list((env.root / ".threadloom" / "logs").glob("*.jsonl"))
    if not logs:
        logs = list(env.db.parent.glob("logs/*.jsonl"))
    events = [json.loads(line) for p in logs for line in p.read_text().splitlines()]
    crash = next(e for e in events if e["event"] == "thread.crashed")
    assert "Traceback (most recent call last)" in crash["exc_info"]
    assert "ScriptError" in crash["exc_info"]
    verbose = env.run("-v", "run", str(job))
    assert "Traceback (most recent call last)" in verbose.stderr
    assert len(verbose.stderr.splitlines()) < 400  # a plain traceback, no locals
