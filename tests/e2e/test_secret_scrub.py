"""No secret in the environment of threadloom's processes (issue 22 item 14).

Root reads any process's ``/proc/PID/environ``, and a worker's ``bash`` with ``sandbox =
"none"`` runs as the user. Here a real job runs through the real ``threadloom`` command with an
Anthropic key, an OpenAI key and a database password in its environment, the loopback fakes of
both APIs checking each request's key, and its worker's bash reads ``/proc/$PPID/environ``,
threadloom's own ``/proc/<pid>/environ`` and every ``/proc/*/environ`` on the host. None of
them may hold a secret, while the providers still authenticate with them. A positive control —
a process of the test's own, started with a marker in its environment — shows that the scan
does read other processes' environments (as root) rather than finding nothing for want of
trying. Outputs are written reversed (``rev``) so that a key that leaked is stored as the text
the test looks for, not masked on the way by a redaction that knows the key's shape.

The other entry points (``mcp``, ``serve``, the console script) are started with the same
secrets and their ``/proc/<pid>/environ`` read while they run; git, which the worktree job
runs, writes down the environment it was given through a wrapper ahead of it on ``PATH``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Env, Result
from tests.fakes.chat_api import FakeChatAPI
from tests.fakes.messages_api import FakeMessagesAPI
from tests.faults._corpus import git_init

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="reading every process's environ is what root can do"
)

TASKS = [{"id": "probe", "title": "probe", "prompt": "look around"}]


class Secrets:
    """Unique secrets for one test, and the environment that carries them."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex
        self.anthropic = f"sk-ant-api03-{tag[:20]}AAAA"
        self.openai = f"sk-proj-{tag[12:32]}BBBB"
        self.db_password = f"pw{tag[8:24]}"
        self.service = f"svc-{tag[4:20]}"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "ANTHROPIC_API_KEY": self.anthropic,
            "OPENAI_API_KEY": self.openai,
            "MY_SERVICE_PASSWORD": self.service,
            "UPSTREAM_DB": f"postgresql://app:{self.db_password}@db.internal/app",
            **extra,
        }

    def needles(self) -> dict[str, str]:
        """What must appear nowhere: each secret's distinctive part."""
        return {
            "anthropic key": self.anthropic[13:],
            "openai key": self.openai[8:],
            "database password": self.db_password,
            "service password": self.service,
        }


@pytest.fixture
def secrets() -> Secrets:
    return Secrets()


@pytest.fixture
def control() -> Iterator[str]:
    """A process of the test's own with a marker in its environment: the scan must find it."""
    marker = f"tl-control-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        ["sleep", "600"], env={"PATH": os.environ["PATH"], "TL_CONTROL": marker}
    )
    try:
        yield marker
    finally:
        proc.kill()
        proc.wait()


def probe_command(pid_hint: str, needles: list[str]) -> str:
    rev = " ".join(f"-e {n[::-1]}" for n in needles)
    return (
        "set -u; "
        # the command's parent (the plain runner's exec helper) and its parent, threadloom
        "tr '\\0' '\\n' < /proc/$PPID/environ | rev | sed 's/^/ppid: /'; echo PPID-READ; "
        "tl=$(sed 's/.*) //' /proc/$PPID/stat | cut -d' ' -f2); "
        "tr '\\0' '\\n' < /proc/$tl/environ | rev | sed 's/^/threadloom: /'; echo TL-READ $tl; "
        f"tr '\\0' '\\n' < /proc/{pid_hint}/environ | rev | sed 's/^/pid: /'; echo PID-READ; "
        # every process on the host
        f"cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | rev | grep -a -F {rev} "
        "| sed 's/^/scan: /'; echo SCANNED $(ls -d /proc/[0-9]* | wc -l)"
    )


def _git_wrapper(root: Path) -> tuple[Path, Path]:
    """A ``git`` ahead of the real one on PATH that appends its environment to a log."""
    real = shutil.which("git")
    assert real, "git is needed"
    bindir, log = root / "bin", root / "git-env.log"
    bindir.mkdir()
    wrapper = bindir / "git"
    wrapper.write_text(f'#!/bin/sh\nenv >> "{log}"\necho ---- >> "{log}"\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    return bindir, log


def _tool_outputs(db: Path) -> str:
    import sqlite3

    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT content FROM messages ORDER BY thread_id, seq").fetchall()
    finally:
        con.close()
    out = []
    for (content,) in rows:
        for block in json.loads(content):
            if block.get("type") == "tool_result":
                out.append(json.dumps(block.get("content")))
    return "\n".join(out)


def test_a_worker_without_the_sandbox_finds_no_secret_in_any_environ_and_the_keys_still_work(
    env: Env, secrets: Secrets, control: str
) -> None:
    git_init(env.ws)
    bindir, git_log = _git_wrapper(env.root)
    needles = [*secrets.needles().values(), control]
    threadloom_pid: list[int] = []

    def worker(request: dict[str, Any]) -> dict[str, Any]:
        answered = [m for m in request["messages"] if m["role"] == "tool"]
        if not answered:
            command = probe_command(str(threadloom_pid[0]), needles)
            return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}
        submit = {"status": "done", "summary": "looked"}
        return {"tool_calls": [{"name": "submit_result", "arguments": submit}]}

    with FakeMessagesAPI() as lead_api, FakeChatAPI(api_key=secrets.openai) as worker_api:
        lead_api.respond_with(lambda _req: {"content": [{"type": "text", "text": "reported"}]})
        worker_api.respond_with(worker)
        job = env.job(
            "scrub",
            [],
            TASKS,
            model="anthropic:claude-sonnet-4-5",
            extra=f'worker_model = "openai:m@{worker_api.base_url}"\nisolation = "worktree"',
            worker='sandbox = "none"',
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "--db", str(env.db), "--json", "run", str(job)],
            cwd=env.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=secrets.env(
                ANTHROPIC_BASE_URL=lead_api.base_url,
                PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}",
                THREADLOOM_DB=f"postgresql://u:{secrets.db_password}@127.0.0.1:1/never-used",
            ),
        )
        threadloom_pid.append(proc.pid)
        out, err = proc.communicate(timeout=180)
        result = Result(proc.returncode, out, err)
        # this SDK sends the key as a bearer token; older ones as x-api-key
        lead_keys = {
            r.headers.get("x-api-key") or r.headers.get("authorization", "").removeprefix("Bearer ")
            for r in lead_api.requests
        }
        worker_rejections = list(worker_api.rejections)
    assert result.code == 0, result.stderr[-3000:]
    # the providers authenticated with the keys taken out of the environment
    assert lead_keys == {secrets.anthropic}
    assert not worker_rejections and worker_api.chat_requests
    outputs = _tool_outputs(env.db)
    # the probe really read what it had to read …
    for read in ("PPID-READ", "TL-READ", "PID-READ", "SCANNED"):
        assert read in outputs, outputs[-3000:]
    assert "=HTAP" in outputs  # PATH=…, reversed: the environ files were read, not refused
    assert f"scan: {control[::-1]}" in outputs, "the scan did not see the control process"
    # … and found no secret, in any form
    for what, needle in secrets.needles().items():
        assert needle not in outputs and needle[::-1] not in outputs, f"{what} leaked"
    # nowhere in the record either (the probe's command holds the reversed needles: not those)
    raw = b"".join(p.read_bytes() for p in env.db.parent.glob(env.db.name + "*"))
    for what, needle in secrets.needles().items():
        assert needle.encode() not in raw, f"{what} in the database file"
    # git ran (worktrees, checkpoints) and never got a secret
    git_env = git_log.read_text()
    assert git_env.count("----") >= 3, "the job ran no git"
    for what, needle in secrets.needles().items():
        assert needle not in git_env, f"git inherited the {what}"


def _environ(pid: int) -> str:
    return Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")


def _check_clean(pid: int, secrets: Secrets) -> None:
    text = _environ(pid)
    assert "PATH=" in text, "the environ was not read"
    for what, needle in secrets.needles().items():
        assert needle not in text, f"{what} in /proc/{pid}/environ"
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "MY_SERVICE_PASSWORD", "UPSTREAM_DB"):
        assert f"{name}=" not in text, f"{name} in /proc/{pid}/environ"


def _console_script() -> str:
    script = Path(sys.executable).parent / "threadloom"
    assert script.exists(), f"the console script is not installed beside {sys.executable}"
    return str(script)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


@contextlib.contextmanager
def _running(argv: list[str], env: Env, secrets: Secrets) -> Iterator[subprocess.Popen[str]]:
    """A long-running command started with the secrets, killed when the block ends."""
    proc = subprocess.Popen(
        argv,
        cwd=env.root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=secrets.env(),
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.parametrize("spelling", ["python -m orchestrator", "threadloom"])
def test_mcp_over_stdio_holds_no_secret_in_its_environ(
    env: Env, secrets: Secrets, spelling: str
) -> None:
    prog = [sys.executable, "-m", "orchestrator"] if spelling != "threadloom" else []
    with _running([*(prog or [_console_script()]), "--db", str(env.db), "mcp"], env, secrets) as p:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(json.dumps(INITIALIZE) + "\n")
        p.stdin.flush()
        answer = p.stdout.readline()  # it is up and serving
        assert '"result"' in answer, answer
        _check_clean(p.pid, secrets)


def test_serve_holds_no_secret_in_its_environ(env: Env, secrets: Secrets) -> None:
    argv = [sys.executable, "-m", "orchestrator", "--db", str(env.db), "serve", "--port", "0"]
    with _running(argv, env, secrets) as p:
        assert p.stderr is not None
        line = p.stderr.readline()  # where it serves: it is up
        assert "http://" in line, line
        _check_clean(p.pid, secrets)
