"""After a SIGKILL, every reader sees the killed run's threads as ``interrupted`` at once —
``ls``, ``ls --status``, ``show``, ``tree`` and the API — without waiting for the lease to run
out or for anyone to resume them; a live run's threads still read ``running``."""

from __future__ import annotations

import asyncio

from store import Status, Store
from tests.e2e.conftest import Env
from tests.e2e.test_crash_and_codes import (
    crashable_job,
    start,
    surviving_sleepers,
    wait_for,
    wait_until_gone,
)


def test_a_killed_runs_threads_read_interrupted_everywhere_at_once(env: Env) -> None:
    proc = start(env, "run", str(crashable_job(env, "alive")))
    wait_for(lambda: len(surviving_sleepers("alive")) == 2, proc)
    # while the run lives, its threads are running (the lead and the two slow workers)
    running = env.run("--json", "ls", "--status", "running").json
    assert len(running) == 3, running
    assert env.run("--json", "ls", "--status", "interrupted").json == []

    proc.kill()
    proc.communicate()
    # well inside the 60 s lease: the owner's pid is gone, so the runner is known to be gone
    interrupted = env.run("--json", "ls", "--status", "interrupted").json
    assert sorted(t["kind"] for t in interrupted) == ["lead", "worker", "worker"]
    assert env.run("--json", "ls", "--status", "running").json == []
    assert {t["status"] for t in env.run("--json", "ls").json} == {"interrupted", "done"}
    lead = next(t["ref"] for t in interrupted if t["kind"] == "lead")
    assert env.run("--json", "show", lead).json["status"] == "interrupted"
    tree = env.run("tree", lead)
    assert tree.code == 0 and "running" not in tree.stdout, tree.stdout

    async def api_view() -> Status:
        store = await Store.open(str(env.db))
        try:
            return (await store.get_thread(lead[2:])).status
        finally:
            await store.close()

    assert asyncio.run(api_view()) == Status.INTERRUPTED
    # and the job resumes from there as before
    res = env.run("--json", "resume", lead, timeout=180)
    assert res.code == 0, res.stderr
    assert {t["status"] for t in env.run("--json", "ls").json} == {"done"}


def _running_worker(env: Env) -> dict[str, object]:
    running = env.run("--json", "ls", "--kind", "worker", "--status", "running").json
    assert running, "no worker is running"
    return running[0]  # type: ignore[no-any-return]


def test_resuming_a_thread_that_runs_elsewhere_is_refused_exit_2_and_appends_nothing(
    env: Env,
) -> None:
    proc = start(env, "run", str(crashable_job(env, "held")))
    try:
        wait_for(lambda: len(surviving_sleepers("held")) == 2, proc)
        busy = _running_worker(env)
        before = env.run("--json", "show", busy["ref"]).json["messages"]
        res = env.run("resume", busy["ref"], "do something else")
        assert res.code == 2, (res.code, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "threadloom: error:" in lines[0], res.stderr
        assert "is being run by" in lines[0], lines[0]
        assert "worker.crashed" not in res.stderr and "Traceback" not in res.stderr
        after = env.run("--json", "show", busy["ref"]).json
        assert after["messages"] == before  # nothing appended
        assert after["status"] == "running"  # and the live run is undisturbed
    finally:
        proc.kill()
        proc.communicate()
        wait_until_gone("held")


def test_fork_of_a_running_thread_forks_at_its_last_turn_boundary(env: Env) -> None:
    proc = start(env, "run", str(crashable_job(env, "forkrun")))
    try:
        wait_for(lambda: len(surviving_sleepers("forkrun")) == 2, proc)
        busy = _running_worker(env)
        shown = env.run("--json", "show", busy["ref"]).json
        head = len(shown["messages"])
        assert any(b["type"] == "tool_use" for b in shown["messages"][-1]["content"])
        res = env.run("--json", "fork", busy["ref"], "--no-run")
        assert res.code == 0, res.stderr
        assert res.json["forked_from"] == {"ref": busy["ref"], "at": head - 1}
        # naming the unanswered turn itself is refused clearly, with the valid point
        bad = env.run("fork", f"{busy['ref']}#{head}", "--no-run")
        assert bad.code == 2, bad.stderr
        assert "not answered yet" in bad.stderr and f"#{head - 1}" in bad.stderr
        assert f"#{head + 1}" not in bad.stderr  # never a message that does not exist
    finally:
        proc.kill()
        proc.communicate()
        wait_until_gone("forkrun")
