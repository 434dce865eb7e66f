"""The bubblewrap sandbox as root (issue 9, items 2, 3, 4 and 10): no capabilities, no mounts, no
host Unix sockets, a process limit, symlinked credential directories hidden, ``.git`` read-only
whether it is a directory or a worktree's file. Every command runs for real under bwrap."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.tools import BashTool, ToolContext, sandbox_status
from workers.tools._pids import PIDS_MAX, process_limit

DECOY = "DECOY-PRIVATE-KEY-9f3c1e"


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    status = sandbox_status()
    if not status.available:
        if os.environ.get("CI"):
            pytest.fail(f"the sandbox must work in CI: {status.reason}")
        pytest.skip(status.reason)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(DECOY)
    monkeypatch.setenv("HOME", str(home))
    return home


async def sh(ws: Path, command: str, **kw: object) -> str:
    ctx = ToolContext(workspace=ws, sandbox="required", **kw)  # type: ignore[arg-type]
    out = await BashTool().invoke({"command": command, "timeout_s": 60}, ctx)
    assert not out.is_error, out.text
    return out.text


@pytest.fixture
def outside() -> Iterator[Path]:
    """A host directory outside the workspace and outside /tmp (the sandbox's /tmp is private)."""
    d = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


async def test_no_capabilities_no_mounts_and_the_hidden_key_stays_hidden(
    ws: Path, home: Path, outside: Path
) -> None:
    key = home / ".ssh" / "id_ed25519"
    out = await sh(
        ws,
        "grep CapEff /proc/self/status; "
        f"mount --bind {ws} /mnt && echo BIND-OK; "
        "mount -o remount,rw / && echo REMOUNT-OK; "
        f"umount {home / '.ssh'} && echo UMOUNT-OK; "
        f"umount -l {home / '.ssh'} && echo UMOUNT-OK; "
        f"cat {key}; "
        f"echo x > {outside / 'outside.txt'} && echo WROTE-OUTSIDE; "
        "echo inside > in.txt && cat in.txt",
    )
    assert "CapEff:\t0000000000000000" in out
    for bad in ("BIND-OK", "REMOUNT-OK", "UMOUNT-OK", "WROTE-OUTSIDE", DECOY):
        assert bad not in out, out
    assert not (outside / "outside.txt").exists()
    assert (ws / "in.txt").read_text() == "inside\n"


async def test_a_fork_bomb_meets_the_process_limit(ws: Path) -> None:
    if os.geteuid() == 0:  # RLIMIT_NPROC does not bind root: the cgroup must exist
        assert process_limit().how == "cgroup", "as root a pids cgroup must be made"
    bomb = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        f"    while n < {PIDS_MAX + 200}:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('LIMIT', n, e.errno)\n"
    )
    (ws / "bomb.py").write_text(bomb)
    out = await sh(ws, "python3 bomb.py")
    assert "LIMIT" in out, out
    started = int(out.split("LIMIT")[1].split()[0])
    assert started < PIDS_MAX
    # the host is fine
    assert subprocess.run(["true"], check=False).returncode == 0
    group = process_limit().group
    if group is not None:
        assert int((group / "pids.max").read_text()) == PIDS_MAX


class _UnixServer:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.sendall(b"HOST-SERVICE-ANSWERED\n")
            conn.close()


@pytest.fixture
def server(outside: Path) -> Iterator[Path]:
    path = outside / "s.sock"
    srv = _UnixServer(path)
    try:
        yield path
    finally:
        srv.sock.close()


async def test_host_unix_sockets_are_unreachable(ws: Path, server: Path) -> None:
    client = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(sys.argv[1]); print(s.recv(100).decode())\n"
    )
    (ws / "client.py").write_text(client)
    outside = subprocess.run(
        ["python3", str(ws / "client.py"), str(server)], capture_output=True, text=True
    )
    assert "HOST-SERVICE-ANSWERED" in outside.stdout  # the server really answers
    out = await sh(
        ws, f"python3 client.py {server}; echo RUN=$(find /run/ /var/run/ -mindepth 1 | wc -l)"
    )
    assert "HOST-SERVICE-ANSWERED" not in out
    assert "PermissionError" in out  # socket(AF_UNIX) itself is refused (seccomp)
    assert "RUN=0" in out, out  # /run and /var/run are empty
    # socketpair (no address, no host service) still works, and so do other families
    out = await sh(
        ws,
        'python3 -c \'import socket; a, b = socket.socketpair(); a.send(b"ok"); '
        'print(b.recv(2)); socket.socket(socket.AF_INET); print("INET-OK")\'',
    )
    assert "b'ok'" in out and "INET-OK" in out
    pg = Path("/var/run/postgresql")
    if shutil.which("psql") and any(pg.glob(".s.PGSQL.*")):
        cmd = "psql -h /var/run/postgresql -U postgres -d postgres -Atc 'select 4242'"
        host = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
        out = await sh(ws, cmd)
        if "4242" in host.stdout:
            assert "4242" not in out, out


async def test_a_symlinked_credential_dir_is_hidden(
    ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = outside / "home2"  # not under /tmp: the sandbox's /tmp is private anyway
    home.mkdir()
    keys = outside / "elsewhere" / "keys"
    keys.mkdir(parents=True)
    (keys / "id_rsa").write_text(DECOY)
    (home / ".ssh").symlink_to(keys)
    (home / ".aws").symlink_to(keys)  # a second link to the same place
    monkeypatch.setenv("HOME", str(home))
    out = await sh(
        ws,
        f"cat {home}/.ssh/id_rsa {keys}/id_rsa {home}/.aws/id_rsa; "
        f"echo KEYS=$(ls -A {keys} | wc -l)",
    )
    assert DECOY not in out
    assert out.count("No such file") == 3, out
    assert "KEYS=0" in out, out


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


async def test_a_worktree_git_file_and_its_git_dirs_are_read_only(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    (repo / "a.txt").write_text("a\n")
    _git("add", "a.txt", cwd=repo)
    _git("commit", "-qm", "a", cwd=repo)
    ws = tmp_path / "wt"
    _git("worktree", "add", "-q", str(ws), cwd=repo)
    git_file = (ws / ".git").read_text()
    gitdir = _git("rev-parse", "--absolute-git-dir", cwd=ws).strip()
    out = await sh(
        ws,
        "echo 'gitdir: /tmp/evil' > .git && echo REWROTE; "
        f"echo '[core]' >> {gitdir}/config && echo CONFIG; "
        f"echo '[core]' >> {repo}/.git/config && echo COMMON-CONFIG; "
        f"echo x > {repo}/.git/hooks/x && echo HOOK; "
        "git status --short && echo STATUS-OK; "
        "python3 -c 'print(6*7)'; echo new > b.txt && echo WS-OK",
    )
    for bad in ("REWROTE", "CONFIG", "HOOK"):
        assert bad not in out, out
    assert "dubious" not in out
    assert "STATUS-OK" in out and "42" in out and "WS-OK" in out
    assert (ws / ".git").read_text() == git_file
    assert not (repo / ".git" / "hooks" / "x").exists()


async def test_a_git_dir_inside_the_workspace_named_by_a_git_file_is_read_only(
    ws: Path,
) -> None:
    _git("init", "-q", "--separate-git-dir", str(ws / "realgit"), str(ws), cwd=ws)
    assert (ws / ".git").is_file()
    out = await sh(
        ws,
        "echo x > realgit/hooks/x && echo HOOK; echo '[core]' >> realgit/config && echo CONFIG; "
        "echo x > .git/config && echo DIRCONFIG; git status --short >/dev/null && echo STATUS-OK",
    )
    assert "HOOK" not in out and "CONFIG" not in out, out
    assert "STATUS-OK" in out
    assert not (ws / "realgit" / "hooks" / "x").exists()


async def test_a_git_directory_stays_read_only(ws: Path) -> None:
    _git("init", "-q", cwd=ws)
    out = await sh(
        ws,
        "echo x > .git/hooks/x && echo HOOK; echo '[core]' >> .git/config && echo CONFIG; "
        "git status --short >/dev/null && echo STATUS-OK",
    )
    assert "HOOK" not in out and "CONFIG" not in out, out
    assert "STATUS-OK" in out


async def test_nested_repositories_in_the_workspace_are_read_only(ws: Path) -> None:
    _git("init", "-q", cwd=ws)
    (ws / "a.txt").write_text("a\n")
    _git("add", "a.txt", cwd=ws)
    _git("commit", "-qm", "a", cwd=ws)
    _git("init", "-q", str(ws / "deep" / "sub"), cwd=ws)
    _git("worktree", "add", "-q", str(ws / "wt"), cwd=ws)
    wt_git = (ws / "wt" / ".git").read_text()
    out = await sh(
        ws,
        "echo x > deep/sub/.git/hooks/pre-commit && echo HOOK; "
        "echo '[core]' >> deep/sub/.git/config && echo CONFIG; "
        "echo 'gitdir: /tmp/evil' > wt/.git && echo REWROTE; "
        "echo ok > deep/sub/file && echo WS-OK",
    )
    for bad in ("HOOK", "CONFIG", "REWROTE"):
        assert bad not in out, out
    assert "WS-OK" in out
    assert (ws / "wt" / ".git").read_text() == wt_git
    assert not (ws / "deep" / "sub" / ".git" / "hooks" / "pre-commit").exists()
