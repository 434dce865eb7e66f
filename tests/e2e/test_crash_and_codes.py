"""SIGKILL and Ctrl-C of ``threadloom run``, the remaining exit codes, the Anthropic path through
the fake Messages API, and the demo."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from store import Store
from tests.e2e.conftest import Env, answered_turns, bash, submit
from tests.e2e.test_jobs import db_read
from tests.fakes.messages_api import FakeMessagesAPI, scripted_responder


def slow_sleep(name: str) -> str:
    """The ``sleep`` argument of job ``name``'s slow workers: unique to this test process and to
    the job, so the processes a run left behind can be found on the host by their command line
    (the pid a sandboxed shell sees is its PID namespace's, not the host's), and a job's count is
    never another job's: the shells of a run killed by the test before still die for a moment
    after it."""
    return f"30.{os.getpid():07d}{zlib.crc32(name.encode()):010d}"


def surviving_sleepers(name: str) -> list[int]:
    """Host pids of processes still running job ``name``'s slow ``sleep``."""
    token = re.compile(rb"(?<![\d.])" + re.escape(slow_sleep(name).encode()) + rb"(?![\d.])")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if token.search(cmdline) and b"pytest" not in cmdline:
            found.append(int(entry))
    return found


def wait_until_gone(name: str, timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := surviving_sleepers(name)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def crashable_job(env: Env, name: str) -> Path:
    return env.job(
        name,
        [
            {"match": f"Job: {name}", "turns": [{"text": "all three reported"}]},
            {"match": "(?m)^Task a:", "turns": [bash("echo a >> a.log"), submit("a done")]},
            {
                "match": "(?m)^Task [bc]:",
                "turns": [
                    bash(f"echo $PPID >> slow.log; sleep {slow_sleep(name)}"),
                    submit("slow one done"),
                ],
            },
        ],
        [
            {"id": "a", "title": "A", "prompt": "quick"},
            {"id": "b", "title": "B", "prompt": "slow"},
            {"id": "c", "title": "C", "prompt": "slow"},
        ],
        extra="max_parallel = 3",
    )


def start(env: Env, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "--db", str(env.db), *args],
        cwd=env.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate: Any, proc: subprocess.Popen[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _all_answered(env: Env, lead: str, *, but_replayable: bool = False) -> None:
    """Every tool call of the job answered by the next message (``answered_turns``);
    ``but_replayable``: a thread's last turn may be a ``dispatch`` left for the resume."""

    async def check(store: Store) -> None:
        for t in await store.job_tree(lead[2:]):
            answered_turns(await store.messages(t.id), but_dispatch=but_replayable, where=t.ref)

    db_read(env, check)


def test_sigkill_mid_job_then_resume_of_the_lead_completes_the_job(env: Env) -> None:
    proc = start(env, "run", str(crashable_job(env, "crash")))
    slow = env.ws / "slow.log"
    wait_for(lambda: len(_lines(env.ws / "a.log")) == 1 and len(_lines(slow)) == 2, proc)
    # let worker a store its result before the kill
    wait_for(
        lambda: any(
            w["status"] == "done" for w in env.run("--json", "ls", "--kind", "worker").json
        ),
        proc,
    )
    assert len(surviving_sleepers("crash")) == 2  # the kill lands mid-tool: both slow shells run
    proc.kill()
    proc.communicate()
    # the killed run's commands die with it (sandbox: --die-with-parent and its PID namespace;
    # plain runner: the exec helper's parent-death signal), so nothing writes after resume
    assert wait_until_gone("crash") == []

    lead = env.run("--json", "ls", "--kind", "lead").json[0]["ref"]
    res = env.run("--json", "resume", lead, timeout=180)
    assert res.code == 0, res.stderr
    assert res.json["report"] == "all three reported"
    assert _lines(env.ws / "a.log") == ["a"]  # the finished worker did not run again
    assert len(_lines(slow)) == 2  # the interrupted tool calls were not re-run
    workers = env.run("--json", "ls", "--kind", "worker").json
    assert len(workers) == 3 and all(w["status"] == "done" for w in workers)
    _all_answered(env, lead)
    assert surviving_sleepers("crash") == []


def test_ctrl_c_leaves_threads_interrupted_and_exits_130(env: Env) -> None:
    proc = start(env, "run", str(crashable_job(env, "stop")))
    wait_for(lambda: len(_lines(env.ws / "slow.log")) == 2, proc)
    wait_for(
        lambda: any(
            w["status"] == "done" for w in env.run("--json", "ls", "--kind", "worker").json
        ),
        proc,
    )
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    statuses = {
        t["kind"]: t["status"] for t in env.run("--json", "ls").json if t["kind"] != "worker"
    }
    assert statuses["lead"] == "interrupted"
    workers = env.run("--json", "ls", "--kind", "worker").json
    assert sorted(w["status"] for w in workers) == ["done", "interrupted", "interrupted"]
    lead = env.run("--json", "ls", "--kind", "lead").json[0]["ref"]
    # the workers' calls are answered ("interrupted"); the lead's dispatch, safe to replay, is
    # left as a crash leaves it, so that resuming the lead runs the job on
    _all_answered(env, lead, but_replayable=True)
    assert env.run("--json", "show", lead).json["messages"][-1]["role"] == "assistant"
    res = env.run("--json", "resume", lead, timeout=180)
    assert res.code == 0, res.stderr
    assert res.json["report"] == "all three reported"
    workers = env.run("--json", "ls", "--kind", "worker").json
    assert len(workers) == 3 and all(w["status"] == "done" for w in workers), workers
    assert len(_lines(env.ws / "slow.log")) == 2  # the stopped tool calls were not re-run
    assert _lines(env.ws / "a.log") == ["a"]  # nor the finished worker
    _all_answered(env, lead)


def test_ctrl_c_then_resume_runs_the_workers_that_had_not_started(env: Env) -> None:
    """One worker at a time: Ctrl-C while the first runs leaves the second ``queued`` under an
    ``interrupted`` lead. Resuming the lead replays its dispatch: the stopped worker is resumed
    (its interrupted call answered, not re-run) and the one that never started runs — where a
    dispatch answered "interrupted" at the stop left both behind for good."""
    path = env.job(
        "queue",
        [
            {"match": "Job: queue", "turns": [{"text": "both reported"}]},
            {
                "match": "(?m)^Task s:",
                "turns": [
                    bash(f"echo s >> slow.log; sleep {slow_sleep('queue')}"),
                    submit("slow one done"),
                ],
            },
            {"match": "(?m)^Task q:", "turns": [bash("echo q >> q.log"), submit("q done")]},
        ],
        [
            {"id": "s", "title": "S", "prompt": "slow"},
            {"id": "q", "title": "Q", "prompt": "quick"},
        ],
        extra="max_parallel = 1",
    )
    proc = start(env, "run", str(path))
    wait_for(lambda: len(surviving_sleepers("queue")) == 1, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    statuses = {w["title"]: w["status"] for w in env.run("--json", "ls", "--kind", "worker").json}
    assert statuses == {"S": "interrupted", "Q": "queued"}, statuses
    assert wait_until_gone("queue") == []
    lead = env.run("--json", "ls", "--kind", "lead").json[0]["ref"]
    assert f"threadloom resume {lead} runs it on" in err  # what to do next, named
    res = env.run("--json", "resume", lead, timeout=180)
    assert res.code == 0, res.stderr
    assert res.json["report"] == "both reported"
    statuses = {w["title"]: w["status"] for w in env.run("--json", "ls", "--kind", "worker").json}
    assert statuses == {"S": "done", "Q": "done"}, statuses
    assert _lines(env.ws / "slow.log") == ["s"]  # the stopped call was not run again
    assert _lines(env.ws / "q.log") == ["q"]  # the worker that had not started ran, once
    _all_answered(env, lead)


def test_unknown_ref_is_exit_3_and_bad_ref_syntax_exit_2(env: Env) -> None:
    env.run("ls")
    res = env.run("--json", "show", "T-zzzzzzzz")
    assert res.code == 3
    assert res.json["error"]["code"] == 3
    res = env.run("show", "T-!!")
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1


def _anthropic_job(env: Env, name: str) -> Path:
    return env.job(
        name,
        [],
        [
            {"id": "a", "title": "A", "prompt": "write a"},
            {"id": "b", "title": "B", "prompt": "write b"},
        ],
        model="anthropic:claude-sonnet-4-5",
        extra="max_parallel = 2",
    )


def test_a_provider_that_keeps_failing_is_exit_4_with_a_clear_message(env: Env) -> None:
    with FakeMessagesAPI() as api:
        api.inject("429", times=100, retry_after_ms=1)
        res = env.run(
            "--json",
            "run",
            str(_anthropic_job(env, "down")),
            env={
                "ANTHROPIC_BASE_URL": api.base_url,
                "ANTHROPIC_API_KEY": "sk-ant-test",
            },
        )
    assert res.code == 4, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("threadloom: error: ") and "rate limit" in last.lower()
    assert res.json["error"]["code"] == 4 and res.json["status"] == "failed"
    assert "sk-ant-test" not in res.stdout + res.stderr


def test_the_anthropic_path_end_to_end_on_the_fake_messages_api(env: Env) -> None:
    script = {
        "rules": [
            {"match": "Job: anth", "turns": [{"text": "both workers reported"}]},
            {"match": "(?m)^Task a:", "turns": [bash("echo a > a.txt"), submit("a written")]},
            {"match": "(?m)^Task b:", "turns": [bash("echo b > b.txt"), submit("b written")]},
        ]
    }
    with FakeMessagesAPI() as api:
        api.respond_with(scripted_responder(script))
        res = env.run(
            "--json",
            "run",
            str(_anthropic_job(env, "anth")),
            env={"ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": "sk-ant-test"},
        )
        rejected = list(api.rejections)
        requests = list(api.message_requests)
    assert res.code == 0, res.stderr
    assert rejected == []
    assert res.json["report"] == "both workers reported"
    assert (env.ws / "a.txt").read_text() == "a\n"
    assert len(requests) == 5  # lead's report + two turns for each worker
    assert all(sum(json.dumps(r).count('"cache_control"') for r in [req]) <= 4 for req in requests)
    # the key reached the SDK, and nothing else: not the database, not a log, not the output
    key = b"sk-ant-test"
    assert all(
        key not in f.read_bytes() for f in env.root.rglob("*") if f.is_file() and f.suffix != ".py"
    )
    assert "sk-ant-test" not in res.stdout + res.stderr
    stats = env.run("--json", "stats", res.json["lead"]).json
    assert (
        stats["total"]["usage"]["input_tokens"] + stats["total"]["usage"]["cache_read_input_tokens"]
        > 0
    )


def test_the_demo_runs_offline_and_leaves_the_sample_passing(env: Env, tmp_path: Path) -> None:
    keep = tmp_path / "demo"
    res = env.run("demo", "--keep", str(keep), timeout=300)
    assert res.code == 0, res.stderr
    assert "root cause" in res.stdout.lower()
    assert "threadloom show T-" in res.stdout and "threadloom fork T-" in res.stdout
    # the closing check's line is what `python -m unittest` printed in the kept copy
    assert "its tests now (python -m unittest): Ran 39 tests, OK\n" in res.stdout
    check = subprocess.run(
        [sys.executable, "-m", "unittest"],
        cwd=keep,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    assert "\nRan 39 tests in " in check.stderr and check.stderr.rstrip().endswith("\nOK")
    doc = env.run("--json", "ls", "--kind", "worker").json
    assert len(doc) == 3 and all(w["status"] == "done" for w in doc)
    assert os.path.isdir(keep)
