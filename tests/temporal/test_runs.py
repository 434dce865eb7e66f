"""Runs of one thread through Temporal (issue 14): one workflow per thread *and* run.

While a remote run is open, a resume with a message is refused (exit 2, nothing appended — SPEC:
one runner at a time per thread; attaching to the open run would drop the message). Cancelling
the run's workflow reaches the host: the thread ends ``interrupted`` with every tool call
answered and the tool's process gone. The next resume is run 2, a workflow of its own, and
delivers its message once."""

from __future__ import annotations

import asyncio
import json
import os
import signal

from store import Store, TextBlock
from tests.e2e.conftest import submit
from tests.temporal.conftest import Cluster
from tests.temporal.test_scale_out import (
    _all_answered,
    _lines,
    _read,
    _wait,
    _workers,
    six_task_job,
)

LONG = f"300.{os.getpid()}9"  # a sleep that outlasts the test's steps, found by its argument


def _runs_long(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        return False
    return LONG.encode() in cmdline and b"pytest" not in cmdline


# the SDK is imported inside: without it the cluster fixture skips (or fails in CI) instead


def workflow_id(thread_id: str, run_no: int) -> str:
    from orchestrator.runtime.temporal.workflow import workflow_id

    return workflow_id(thread_id, run_no)


def _statuses(cluster: Cluster, thread_id: str, runs: int) -> list[str]:
    from temporalio.client import Client

    async def go() -> list[str]:
        client = await Client.connect(cluster.address)
        out = []
        for n in range(1, runs + 1):
            desc = await client.get_workflow_handle(workflow_id(thread_id, n)).describe()
            out.append(desc.status.name if desc.status is not None else "?")
        return out

    return asyncio.run(go())


def _cancel(cluster: Cluster, thread_id: str, run_no: int) -> None:
    from temporalio.client import Client

    async def go() -> None:
        client = await Client.connect(cluster.address)
        await client.get_workflow_handle(workflow_id(thread_id, run_no)).cancel()

    asyncio.run(go())


def _texts(cluster: Cluster, thread_id: str) -> list[str]:
    async def go(store: Store) -> list[str]:
        return [
            b.text
            for m in await store.messages(thread_id)
            if m.role == "user"
            for b in m.content
            if isinstance(b, TextBlock)
        ]

    out: list[str] = _read(cluster, go)
    return out


def test_a_resume_while_the_remote_run_is_open_is_refused_and_cancel_reaches_the_host(
    cluster: Cluster,
) -> None:
    cluster.add_host("a")
    job = six_task_job(cluster, "runs", slow=f"sleep {LONG}")
    script = job.with_suffix(".json")  # the scripted model's rules: one for the resume
    rules = json.loads(script.read_text())
    rules["rules"].insert(0, {"match": "^more please", "turns": [submit("more done")]})
    script.write_text(json.dumps(rules))
    lead = cluster.start("--json", "run", str(job))
    try:
        _wait(lambda: len(_lines(cluster, "slow.log")) == 1, "the slow tool to start")
        slow = next(w for w in _workers(cluster) if w["title"] == "S")
        tid = slow["ref"][2:]
        before = cluster.json("show", slow["ref"])["messages"]

        res = cluster.run("resume", slow["ref"], "more please")
        assert res.code == 2, res.stderr
        assert "running on a worker host" in res.stderr and workflow_id(tid, 1) in res.stderr
        assert cluster.json("show", slow["ref"])["messages"] == before  # nothing appended

        _cancel(cluster, tid, 1)  # the workflow's cancellation, as Ctrl-C or cancel sends it
        out, err = lead.communicate(timeout=90)
    finally:
        if lead.poll() is None:
            lead.send_signal(signal.SIGKILL)
            lead.communicate()
    assert '"six reported"' in out, err
    slow = next(w for w in _workers(cluster) if w["title"] == "S")
    assert slow["status"] == "interrupted"
    assert any("interrupted" in r for r in _all_answered(cluster, slow["job"])["slow"])
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _runs_long(p)]

    res = cluster.run("--json", "resume", slow["ref"], "more please", timeout=90)
    assert res.code == 0, res.stderr
    assert cluster.json("show", slow["ref"])["status"] == "done"
    assert _texts(cluster, tid).count("more please") == 1
    assert _statuses(cluster, tid, 2) == ["CANCELED", "COMPLETED"]
    assert len(_lines(cluster, "slow.log")) == 1  # run 2 did not run the slow tool again
