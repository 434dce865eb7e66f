"""The plain runner (no bubblewrap): the command's parent is a scrubbed exec helper, credentials
are filtered by value too, and no command outlives a SIGKILLed threadloom — real subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workers.tools import BashTool, ToolContext, scrubbed_environment

SECRET = "sk-ant-plainrunnertestsecret0123456789"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


@pytest.mark.parametrize("sandbox", ["none", "auto"])
async def test_the_parent_environment_is_not_threadloom_s(
    ws: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("THREADLOOM_BWRAP", "/nonexistent")  # auto falls back to the plain runner
    ctx = ToolContext(workspace=ws, sandbox=sandbox)  # type: ignore[arg-type]
    out = await BashTool().invoke(
        {"command": "tr '\\0' '\\n' < /proc/$PPID/environ; echo; echo parent=$PPID"}, ctx
    )
    assert "[exit code: 0]" in out.text, out.text
    assert "parent=" in out.text
    assert SECRET not in out.text
    assert "ANTHROPIC_API_KEY" not in out.text
    assert f"parent={os.getpid()}\n" not in out.text


async def test_values_holding_a_secret_or_a_credential_url_are_dropped(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("THREADLOOM_DB", "postgresql://u:pw@host/db")
    monkeypatch.setenv("COPY_OF_IT", f"prefix-{SECRET}-suffix")
    monkeypatch.setenv("PLAIN_URL", "https://example.com/a:b")
    env = scrubbed_environment(os.environ, None)
    assert "THREADLOOM_DB" not in env and "COPY_OF_IT" not in env
    assert env["PLAIN_URL"] == "https://example.com/a:b"
    out = await BashTool().invoke({"command": "env"}, ToolContext(workspace=ws))
    assert "u:pw@" not in out.text and SECRET not in out.text
    assert "PLAIN_URL=" in out.text


CHILD = r"""
import asyncio, sys
from pathlib import Path
from workers.tools import BashTool, ToolContext
ws = Path(sys.argv[1])
command = (
    "setsid sh -c 'echo $$ > bg; sleep 30; echo late > bg_file' </dev/null >/dev/null 2>&1 & "
    "nohup sh -c 'sleep 30; echo late > nohup_file' </dev/null >/dev/null 2>&1 & "
    "echo $$ > fg; mkfifo go; cat go >/dev/null; sleep 30; echo late > file"
)
asyncio.run(BashTool().invoke({"command": command}, ToolContext(workspace=ws, sandbox="none")))
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _mentions(ws: Path) -> list[int]:
    """Live processes whose command line or working directory is the test's workspace."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == str(ws) and _alive(int(entry)):
            found.append(int(entry))
    return found


def test_sigkill_of_threadloom_kills_every_process_of_the_command(ws: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(ws)], cwd=root)
    try:
        deadline = time.monotonic() + 30
        while not (ws / "go").exists() or not (ws / "bg").exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        bg = int((ws / "bg").read_text())
        fg = int((ws / "fg").read_text())
        (ws / "go").write_text("x")  # unblocks the foreground: it now sleeps 30 then writes
        assert _alive(bg) and _alive(fg)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 10
    while _mentions(ws) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _mentions(ws) == []
    assert not _alive(bg) and not _alive(fg)
    for name in ("file", "bg_file", "nohup_file"):
        assert not (ws / name).exists()
