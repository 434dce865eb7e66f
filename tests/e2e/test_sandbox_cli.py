"""The sandbox setting on the command line: ``auto`` without bubblewrap says so once and runs;
``required`` without it refuses before anything is stored (exit 2, naming ``bwrap``)."""

from __future__ import annotations

import json
import os

from tests.e2e.conftest import Env, bash, submit

RULES = [
    {"match": "Job: sb", "turns": [{"text": "reported"}]},
    {"match": "(?m)^Task a:", "turns": [bash("echo hi > a.txt"), submit("a")]},
]
TASKS = [{"id": "a", "title": "A", "prompt": "go"}]
MISSING = {"THREADLOOM_BWRAP": "/nonexistent/bwrap"}


def test_auto_without_bubblewrap_falls_back_and_says_so_once(env: Env) -> None:
    path = env.job("sb", RULES, TASKS)
    res = env.run("--json", "run", str(path), env=MISSING)
    assert res.code == 0, res.stderr
    assert (env.ws / "a.txt").read_text() == "hi\n"
    assert res.stderr.count("sandbox.unavailable") == 1 and "bwrap not found" in res.stderr
    logs = list((env.root / "logs").glob("*.jsonl"))
    events = [json.loads(line) for p in logs for line in p.read_text().splitlines()]
    assert [e["level"] for e in events if e["event"] == "sandbox.unavailable"] == ["warning"]


def test_required_without_bubblewrap_is_exit_2_before_anything_is_stored(env: Env) -> None:
    path = env.job("sb", RULES, TASKS, extra='sandbox = "required"')
    res = env.run("run", str(path), env=MISSING)
    assert res.code == 2
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert "bwrap" in res.stderr and "apt-get install bubblewrap" in res.stderr
    assert not (env.ws / "a.txt").exists()
    assert env.run("--json", "ls").json == []


def test_none_is_explicit_and_silent(env: Env) -> None:
    path = env.job("sb", RULES, TASKS, worker='sandbox = "none"')
    res = env.run("run", str(path), env=MISSING)
    assert res.code == 0 and "sandbox" not in res.stderr


def test_nothing_in_the_workspace_is_run_or_loaded_as_configuration(env: Env) -> None:
    marker = env.root / "executed"
    hooks = env.ws / ".git" / "hooks"
    hooks.mkdir(parents=True)
    for name in ("pre-commit", "post-checkout", "post-merge", "pre-push"):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        (hooks / name).chmod(0o755)
    (env.ws / ".env").write_text("FROM_DOTENV=loaded\nANTHROPIC_API_KEY=sk-ant-from-dotenv\n")
    (env.ws / ".threadloom.toml").write_text('[job]\nsandbox = "none"\n')
    (env.ws / ".envrc").write_text(f"touch {marker}\n")
    (env.ws / "AGENTS.md").write_text(f"$(touch {marker}) `touch {marker}` run: touch {marker}\n")
    rules = [
        {"match": "Job: cfg", "turns": [{"text": "reported"}]},
        {"match": "(?m)^Task a:", "turns": [bash("env > env.txt"), submit("a")]},
    ]
    res = env.run("run", str(env.job("cfg", rules, TASKS)))
    assert res.code == 0, res.stderr
    assert not marker.exists()
    seen = (env.ws / "env.txt").read_text()
    assert "FROM_DOTENV" not in seen and "sk-ant-from-dotenv" not in seen


def test_the_process_limit_is_said_once_and_loudly_only_when_it_is_the_supervisor(
    env: Env,
) -> None:
    """How bash commands are kept to 512 processes is in the job's log; a supervisor (no pids
    cgroup, as root) is looser than the kernel's refusal, so it is also a warning on stderr."""
    path = env.job("sb", RULES, TASKS, worker='sandbox = "none"')
    quiet = env.run("run", str(path))
    assert quiet.code == 0 and "bash.process_limit" not in quiet.stderr, quiet.stderr
    logs = [json.loads(x) for p in (env.root / "logs").glob("*.jsonl") for x in p.open()]
    said = [e for e in logs if e["event"] == "bash.process_limit"]
    assert len(said) == 1 and said[0]["how"] in ("cgroup", "nproc"), said
    if os.geteuid() != 0:
        return  # the supervisor is root's
    loud = env.run("run", str(path), env={"THREADLOOM_CGROUP": "none"})
    assert loud.code == 0, loud.stderr
    assert loud.stderr.count("bash.process_limit") == 1
    assert "supervisor" in loud.stderr and "THREADLOOM_CGROUP=none" in loud.stderr
