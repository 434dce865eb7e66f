"""``threadloom worker`` holds no secret in its environment either (issue 22 item 14): a host
started with API keys and a password runs a worker whose bash (``sandbox = "none"``, as every
job here) reads the host's ``/proc/PID/environ`` and every ``/proc/*/environ``; a process of the
test's own with a marker in its environment shows the scan reads others."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from store import Store, ToolResultBlock
from tests.e2e.conftest import submit
from tests.e2e.test_secret_scrub import Secrets, probe_command
from tests.temporal.conftest import Cluster

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="reading every process's environ is what root can do"
)


def test_a_worker_host_holds_no_secret_and_its_workers_find_none(cluster: Cluster) -> None:
    secrets = Secrets()
    control = f"tl-control-{uuid.uuid4().hex}"
    sleeper = subprocess.Popen(["sleep", "600"], env={"TL_CONTROL": control})
    home = cluster.root / "hosts" / "h1"
    (home / "home").mkdir(parents=True)
    log = home / "worker.log"
    host = subprocess.Popen(
        cluster.cli("-v", "worker", "--slots", "1", "--task-queue", cluster.queue),
        cwd=home,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=secrets.env(THREADLOOM_TEMPORAL_ADDRESS=cluster.address, HOME=str(home / "home")),
    )
    cluster.hosts.append(host)
    try:
        deadline = time.monotonic() + 120
        while not log.read_text():  # its first line is written after the secrets were taken
            assert host.poll() is None, "the host exited"
            assert time.monotonic() < deadline, "the host said nothing"
            time.sleep(0.05)
        environ = Path(f"/proc/{host.pid}/environ").read_bytes().decode("utf-8", "replace")
        assert "PATH=" in environ
        for what, needle in secrets.needles().items():
            assert needle not in environ, f"{what} in the worker host's environ"
        needles = [*secrets.needles().values(), control]
        rules = [
            {"match": "Job: scrub", "turns": [{"text": "reported"}]},
            {
                "match": "(?m)^Task probe:",
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "bash",
                                "input": {"command": probe_command(str(host.pid), needles)},
                            }
                        ]
                    },
                    submit("looked"),
                ],
            },
        ]
        job = cluster.job("scrub", rules, [{"id": "probe", "title": "probe", "prompt": "look"}])
        res = cluster.run("--json", "run", str(job), timeout=300)
        assert res.code == 0, res.stderr[-3000:]
        (ref,) = [w["ref"] for w in cluster.json("ls", "--kind", "worker")]
        shown = asyncio.run(_tool_outputs(cluster.db, ref))
    finally:
        sleeper.kill()
        sleeper.wait()
    for read in ("PPID-READ", "TL-READ", "PID-READ", "SCANNED"):
        assert read in shown, shown[-3000:]
    assert f"scan: {control[::-1]}" in shown, "the scan did not see the control process"
    for what, needle in secrets.needles().items():
        assert needle not in shown and needle[::-1] not in shown, f"{what} leaked"


async def _tool_outputs(db: str, ref: str) -> str:
    """What the worker's tools answered (not what it asked: the probe's command holds the
    reversed needles)."""
    store = await Store.open(db, migrate=False)
    try:
        messages = await store.messages(ref[2:])
    finally:
        await store.close()
    return "\n".join(
        str(b.content) for m in messages for b in m.content if isinstance(b, ToolResultBlock)
    )
