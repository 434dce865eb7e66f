"""A run that cannot start stores nothing (exit 2, one line naming the model or file); a job
whose workers all failed is not ``done``."""

from __future__ import annotations

import io
import json
from pathlib import Path

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


def test_a_script_with_no_rule_for_a_message_says_so_once_with_no_traceback(env: Env) -> None:
    """A worker whose message matches no rule: the scripted model cannot answer. That is the
    model's failure (the thread ends failed, naming the text), not a crash of threadloom's: no
    traceback, and the reason is said once — here, where every worker failed, as the job's
    error line (the worker's line of the report names it as its summary)."""
    job = env.job(
        "crash",
        [{"match": "Job: crash", "turns": [{"text": "report"}]}],
        [{"id": "a", "title": "A", "prompt": "p"}],
    )
    res = env.run("run", str(job))
    assert res.code == 1, res.stderr
    assert "Traceback" not in res.stderr and "thread.crashed" not in res.stderr, res.stderr
    assert res.stderr.count("no rule matches") == 1, res.stderr
    # the worker's line of the report, its summary (cut to the line) naming the model
    assert res.stdout.count("scripted model ") == 1, res.stdout


async def test_a_crash_is_one_line_on_the_console_and_the_traceback_is_in_the_job_log(
    tmp_path: Path,
) -> None:
    """A real crash (a bug: the model double raises RuntimeError in a worker) is one line on
    the console pointing at the job log, which holds the traceback; with -v the console has
    the traceback too, without locals."""
    from orchestrator import Orchestrator, parse_job
    from orchestrator.logging import configure_logging, set_job_log_dir
    from workers import ModelRequest, ModelResponse
    from workers.providers import FunctionModel, text_response

    def reply(request: ModelRequest) -> ModelResponse:
        if request.messages[0].text.startswith("Task a:"):
            raise RuntimeError("a bug in the model double")
        return text_response("report")

    (tmp_path / "ws").mkdir()
    job = parse_job(
        '[job]\nname = "crash"\ngoal = "g"\nworkspace = "ws"\nmodel = "scripted:unused.json"\n'
        '\n[[task]]\nid = "a"\ntitle = "A"\nprompt = "p"\n',
        name="crash.toml",
        base_dir=tmp_path,
    )
    for verbose in (0, 1):
        console = io.StringIO()
        configure_logging(verbose, stream=console)
        logs = tmp_path / f"logs-{verbose}"
        set_job_log_dir(logs)
        try:
            async with await Orchestrator.open(
                str(tmp_path / f"t{verbose}.db"),
                model_factory=lambda spec, **_: FunctionModel(reply),
            ) as orch:
                outcome = await orch.run_job(job)
        finally:
            set_job_log_dir(None)
            configure_logging(0)
        assert outcome.workers[0].status == "failed"
        out = console.getvalue()
        crashed = [ln for ln in out.splitlines() if "thread.crashed" in ln]
        assert len(crashed) == 1, out
        if not verbose:  # the layer above notes it (at INFO: the job log, -v) and no more
            assert "worker.crashed" not in out
        events = [
            json.loads(line) for f in logs.glob("*.jsonl") for line in f.read_text().splitlines()
        ]
        crash = next(e for e in events if e["event"] == "thread.crashed")
        assert "Traceback (most recent call last)" in crash["exc_info"]
        assert "a bug in the model double" in crash["exc_info"]
        assert any(e["event"] == "worker.crashed" for e in events)
        if verbose:
            assert "Traceback (most recent call last)" in out
            assert len(out.splitlines()) < 400  # a plain traceback, no locals
        else:
            assert "Traceback" not in out and "the traceback is in" in out
            assert len(out.splitlines()) < 6, out
