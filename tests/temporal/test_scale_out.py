"""Workers on many hosts through Temporal (SPEC §Scale-out): a job's worker runs execute on
``threadloom worker`` processes; a host SIGKILLed mid-tool has its thread resumed on another
(the tool not re-run, every message there); a lead SIGKILLed mid-job is resumed and reattaches
to the runs it started; ``executor = "temporal"`` without PostgreSQL is exit 2."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from store import Store
from tests.e2e.conftest import answered_turns, bash, submit
from tests.temporal.conftest import Cluster

SLOW = f"30.{os.getpid()}7"  # a sleep of this test process, found by its argument


def _read(cluster: Cluster, fn: Any) -> Any:
    async def go() -> Any:
        store = await Store.open(cluster.db, migrate=False)
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(go())


def _lines(cluster: Cluster, name: str) -> list[str]:
    path = cluster.ws / name
    return path.read_text().splitlines() if path.exists() else []


def _wait(predicate: Any, what: str, timeout: float = 120) -> None:
    # generous: on a loaded 2-CPU machine two hosts took over a minute to start polling
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def six_task_job(cluster: Cluster, name: str, *, slow: str) -> Any:
    quick = [{"id": f"q{i}", "title": f"Q{i}", "prompt": "quick"} for i in range(1, 6)]
    return cluster.job(
        name,
        [
            {"match": f"Job: {name}", "turns": [{"text": "six reported"}]},
            {
                "match": "(?m)^Task q",
                "turns": [bash("echo $PPID >> quick.log"), submit("quick one done")],
            },
            {
                "match": "(?m)^Task slow:",
                "turns": [bash(f"echo $PPID >> slow.log; {slow}"), submit("slow one done")],
            },
        ],
        [*quick, {"id": "slow", "title": "S", "prompt": "slow"}],
    )


def _workers(cluster: Cluster) -> list[dict[str, Any]]:
    return list(cluster.json("ls", "--kind", "worker"))


def _story(cluster: Cluster) -> str:
    """What the hosts logged about their runs, for a failure's message."""
    keys = ("temporal.run", "thread.finished", "warning", "error", "Traceback", "lease.")
    out = []
    for log in sorted((cluster.root / "hosts").glob("*/worker.log")):
        lines = [
            ln for ln in log.read_text(errors="replace").splitlines() if any(k in ln for k in keys)
        ]
        out.append(f"== {log.parent.name}\n" + "\n".join(ln[:300] for ln in lines[-60:]))
    return "\n".join(out)


def _slow_owner_pid(cluster: Cluster) -> int:
    async def owner(store: Store) -> str | None:
        for t in await store.list_threads(kind="worker"):
            if (t.task or {}).get("id") == "slow":
                return t.lease_owner
        return None

    found = _read(cluster, owner)
    assert found, "the slow worker holds no lease"
    return int(found.split(":")[1])


def _all_answered(
    cluster: Cluster, lead: str, *, but_dispatch: bool = False
) -> dict[str, list[str]]:
    """Every tool call of the job answered (``answered_turns``); the tool results' texts per
    task. ``but_dispatch``: a thread's last turn may be a ``dispatch`` left for the resume."""
    out: dict[str, list[str]] = {}

    async def check(store: Store) -> None:
        for t in await store.job_tree(lead[2:]):
            msgs = await store.messages(t.id)
            for got in answered_turns(msgs, but_dispatch=but_dispatch, where=t.ref):
                out.setdefault(str((t.task or {}).get("id")), []).extend(
                    str(b.content) for b in got
                )

    _read(cluster, check)
    return out


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["killed", "stopped"])
def test_a_host_killed_mid_tool_has_its_thread_resumed_on_another(
    cluster: Cluster, sig: signal.Signals
) -> None:
    a, b = cluster.add_host("a"), cluster.add_host("b")
    lead = cluster.start("--json", "run", str(six_task_job(cluster, "kill", slow=f"sleep {SLOW}")))
    _wait(lambda: len(_lines(cluster, "slow.log")) == 1, "the slow tool to start")
    pid = _slow_owner_pid(cluster)
    victim = a if pid == a.pid else b
    assert pid in (a.pid, b.pid)  # the run executes on a host, not in the lead's process
    victim.send_signal(sig)  # SIGINT: it ends its runs interrupted, and they move on too
    victim.wait(timeout=90)
    out, err = lead.communicate(timeout=90)
    assert lead.returncode == 0, err
    assert '"six reported"' in out
    workers = _workers(cluster)
    statuses = {w["title"]: w["status"] for w in workers}
    assert len(workers) == 6 and set(statuses.values()) == {"done"}, (statuses, _story(cluster))
    assert len(_lines(cluster, "slow.log")) == 1  # the killed tool was not run again
    results = _all_answered(cluster, workers[0]["job"])
    # nor any quick one: each ran at most once; one the host was running when it died may
    # have run (its result is "interrupted; effect unknown") or not
    quick = [results[f"q{i}"] for i in range(1, 6)]
    finished = sum(1 for r in quick if not any(x.startswith("interrupted") for x in r))
    assert finished <= len(_lines(cluster, "quick.log")) <= 5
    assert any("interrupted" in r for r in results["slow"])
    # the survivor took the dead host's (expired) lease over and resumed the thread
    survivor = cluster.root / "hosts" / ("b" if victim is a else "a") / "worker.log"
    log = survivor.read_text()
    slow_ref = next(w["ref"] for w in workers if w["title"] == "S")
    assert f"attempt=2 thread={slow_ref}" in log


def test_a_lead_killed_mid_job_is_resumed_and_reattaches(cluster: Cluster) -> None:
    cluster.add_host("a")
    cluster.add_host("b")
    job = six_task_job(cluster, "lead", slow="sleep 3")
    lead = cluster.start("--json", "run", str(job))
    _wait(lambda: len(_lines(cluster, "slow.log")) == 1, "the slow tool to start")
    lead.send_signal(signal.SIGKILL)
    lead.communicate()
    ref = cluster.json("ls", "--kind", "lead")[0]["ref"]
    res = cluster.run("--json", "resume", ref, timeout=90)
    assert res.code == 0, res.stderr
    assert '"six reported"' in res.stdout
    workers = _workers(cluster)
    assert len(workers) == 6 and all(w["status"] == "done" for w in workers)
    # the remote runs went on without the lead; the resumed lead waited for them, ran none
    assert len(_lines(cluster, "slow.log")) == 1
    assert len(_lines(cluster, "quick.log")) == 5
    results = _all_answered(cluster, ref)
    assert not any("interrupted" in r for r in results["slow"])


def test_ctrl_c_of_the_lead_reaches_the_remote_run(cluster: Cluster) -> None:
    cluster.add_host("a")
    lead = cluster.start("--json", "run", str(six_task_job(cluster, "stop", slow=f"sleep {SLOW}")))
    _wait(lambda: len(_lines(cluster, "slow.log")) == 1, "the slow tool to start")
    _wait(lambda: len(_lines(cluster, "quick.log")) == 5, "the quick tools")
    lead.send_signal(signal.SIGINT)
    _out, err = lead.communicate(timeout=60)
    assert lead.returncode == 130, err
    slow = next(w for w in _workers(cluster) if w["title"] == "S")
    assert slow["status"] == "interrupted"  # the workflow's cancellation ended it on the host
    # the lead's dispatch is left for its resume to replay; every worker's call is answered
    results = _all_answered(cluster, slow["job"], but_dispatch=True)
    assert any("interrupted" in r for r in results["slow"])
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _runs_slow(p)]


def _runs_slow(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        return False
    return SLOW.encode() in cmdline and b"pytest" not in cmdline


def test_temporal_without_postgresql_is_exit_2_naming_it(cluster: Cluster) -> None:
    job = six_task_job(cluster, "sqlite", slow="true")
    res = cluster.run("--db", str(cluster.root / "t.db"), "run", str(job))
    assert res.code == 2
    assert "PostgreSQL" in res.stderr and 'executor = "temporal"' in res.stderr
    res = cluster.run("--db", str(cluster.root / "t.db"), "worker")
    assert res.code == 2 and "PostgreSQL" in res.stderr


def test_a_host_that_comes_back_late_cannot_append(cluster: Cluster) -> None:
    a, b = cluster.add_host("a"), cluster.add_host("b")
    lead = cluster.start("--json", "run", str(six_task_job(cluster, "late", slow="sleep 4")))
    _wait(lambda: len(_lines(cluster, "slow.log")) == 1, "the slow tool to start")
    pid = _slow_owner_pid(cluster)
    frozen, other = (a, "b") if pid == a.pid else (b, "a")
    frozen.send_signal(signal.SIGSTOP)  # alive, silent: its lease expires, its run moves
    try:
        _out, err = lead.communicate(timeout=90)
        assert lead.returncode == 0, err
    finally:
        frozen.send_signal(signal.SIGCONT)
    log = cluster.root / "hosts" / ("a" if other == "b" else "b") / "worker.log"
    # back, the late host finds its sleep ended and tries to store the result, or (told by
    # Temporal that its run moved) to leave the thread interrupted: refused either way. Stopped
    # and waited for, it can write nothing more, so the store is checked after that.
    frozen.send_signal(signal.SIGINT)
    frozen.wait(60)
    refusals = ("lease.lost", "no longer holds the lease", "cannot go from done")
    assert any(r in log.read_text() for r in refusals), _story(cluster)
    workers = _workers(cluster)
    # and none of its stale runs moved a finished thread back (a task it had received before it
    # froze, started once it woke, took a done thread's lease and left it interrupted)
    statuses = {w["title"]: w["status"] for w in workers}
    assert set(statuses.values()) == {"done"}, (statuses, _story(cluster))
    results = _all_answered(cluster, workers[0]["job"])
    bash_result, submitted = results["slow"]  # the late host's bash result is not among them
    assert bash_result.startswith("interrupted") and "recorded" in submitted
    assert len(_lines(cluster, "slow.log")) == 1
