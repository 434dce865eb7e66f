"""Escapes tried from ``bash`` inside the sandbox: each must fail.

Writing outside the workspace, writing to the workspace's ``.git``, opening a network connection
(even to a server listening on the host's loopback), reading a file the sandbox hides, and
leaving a background process behind (``setsid``/``nohup``/double fork).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from workers.tools import BashTool, ToolContext, sandbox_status


@pytest.fixture(autouse=True)
def _need_bwrap() -> None:
    """Under ``CI`` a missing bubblewrap is a failure, never a skip."""
    status = sandbox_status()
    if status.available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the sandbox tests: {status.reason}")
    pytest.skip(f"bubblewrap unavailable: {status.reason}")


def _ctx(ws: Path, **kw: object) -> ToolContext:
    return ToolContext(workspace=ws, sandbox="required", **kw)  # type: ignore[arg-type]


async def _bash(ctx: ToolContext, command: str) -> str:
    out = await BashTool().invoke({"command": command, "timeout_s": 30}, ctx)
    assert not out.is_error, out.text
    return out.text


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def test_writing_outside_the_workspace_fails_and_inside_works(
    ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    home = Path.home() / f"threadloom-escape-{uuid.uuid4().hex}"
    text = await _bash(
        _ctx(ws),
        f"echo x > {outside}; echo x > {home}; echo x > /usr/escape; echo ok > inside.txt",
    )
    assert "Read-only file system" in text
    assert not outside.exists() and not home.exists() and not Path("/usr/escape").exists()
    assert (ws / "inside.txt").read_text() == "ok\n"


async def test_tmp_is_private_and_the_git_directory_read_only(ws: Path) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    marker = f"/tmp/threadloom-private-{uuid.uuid4().hex}"
    text = await _bash(
        _ctx(ws), f"echo x > {marker} && cat {marker}; echo evil > .git/HEAD; mkdir .git/hooks"
    )
    assert "x" in text and not Path(marker).exists()
    assert (ws / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert not (ws / ".git" / "hooks").exists()


async def test_no_network_not_even_the_hosts_loopback(ws: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        probe = (
            "import socket\n"
            f"for host, port in (('127.0.0.1', {port}), ('1.1.1.1', 80)):\n"
            "    try:\n"
            "        socket.create_connection((host, port), timeout=2)\n"
            "        print('CONNECTED', host)\n"
            "    except OSError as e:\n"
            "        print('FAILED', host, e)\n"
        )
        (ws / "probe.py").write_text(probe)
        text = await _bash(_ctx(ws), "python3 probe.py")
        assert "CONNECTED" not in text and text.count("FAILED") == 2, text
        # network = true lets the command reach the host's loopback server
        text = await _bash(_ctx(ws, network=True), "python3 probe.py | head -1")
        assert "CONNECTED 127.0.0.1" in text, text
    finally:
        server.close()


async def test_hidden_paths_and_credentials_cannot_be_read(ws: Path, tmp_path: Path) -> None:
    secret_dir = tmp_path / "db"
    secret_dir.mkdir()
    (secret_dir / "threads.db").write_text("the whole store")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE")
    (home / ".netrc").write_text("machine x password hunter22")
    env = {**os.environ, "HOME": str(home)}
    old = os.environ.copy()
    os.environ.update(env)
    try:
        text = await _bash(
            _ctx(ws, hidden=(secret_dir,)),
            f"cat {secret_dir}/threads.db; ls {home}/.ssh; cat {home}/.ssh/id_ed25519;"
            f" cat {home}/.netrc; echo end",
        )
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert "the whole store" not in text and "PRIVATE" not in text and "hunter22" not in text
    assert "end" in text


async def test_no_background_process_outlives_the_command(ws: Path) -> None:
    tag = uuid.uuid4().hex[:12]
    text = await _bash(
        _ctx(ws),
        f"(setsid sh -c 'sleep 300; : {tag}' &) ; "
        f"nohup sh -c 'sleep 301; : {tag}' >/dev/null 2>&1 & "
        f"( ( sh -c 'sleep 302; : {tag}' & ) & ) ; echo started",
    )
    assert "started" in text

    def survivors() -> list[str]:
        found = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if tag.encode() in cmd:
                    found.append(cmd.decode(errors="replace"))
        return found

    deadline = time.monotonic() + 5
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert survivors() == []


async def test_required_without_bubblewrap_runs_nothing(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THREADLOOM_BWRAP", str(ws / "no-such-bwrap"))
    out = await BashTool().invoke({"command": "echo ran > ran.txt"}, _ctx(ws))
    assert out.is_error and "bwrap not found" in out.text
    assert not (ws / "ran.txt").exists()
    auto = await BashTool().invoke(
        {"command": "echo ran > ran.txt"}, ToolContext(workspace=ws, sandbox="auto")
    )
    assert not auto.is_error and (ws / "ran.txt").exists()
