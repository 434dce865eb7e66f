"""The OS sandbox for ``bash``: bubblewrap (``bwrap``) when it is installed and works.

Under the sandbox a command:

- runs in its own user namespace (``--unshare-user``, uid/gid 0 mapped to the caller's own ids, so
  file ownership in the workspace looks as it does outside and git sees no dubious ownership)
  with every capability dropped (``--cap-drop ALL``: ``CapEff`` 0, even when threadloom is root):
  no ``mount``, ``umount`` or remount, so the mounts below cannot be undone;
- sees the whole filesystem read-only except the workspace (writable) and a private, empty
  ``/tmp``; ``.git`` read-only wherever it sits in the workspace (the workspace's own and nested
  repositories', found by a bounded scan of ``GIT_SCAN_MAX_DIRS`` directories), whether it is a
  directory or a worktree's ``.git`` file, and the git dir and common dir such a file names;
- cannot reach host services over Unix sockets: ``/run`` (hence ``/var/run``),
  ``/var/lib/docker`` and ``/var/lib/postgresql`` are empty tmpfs mounts, and a seccomp filter
  makes ``socket(AF_UNIX, …)`` (and ``io_uring_setup``) fail with EPERM, so no path-named or
  abstract Unix socket anywhere can be connected to; ``socketpair`` still works; any other
  syscall ABI (x32, a foreign arch) gets EPERM for every call;
- has its own PID namespace (when the command's shell exits, the kernel kills everything it left
  behind, ``setsid`` or not), a new session (``--new-session``: no TIOCSTI into a terminal), and
  ``--die-with-parent`` (if threadloom dies, the command dies with it);
- has no network unless the job sets ``network = true`` (a fresh network namespace with only
  loopback);
- cannot hold more than ``PIDS_MAX`` (512) processes and threads at once: the process limit of
  every command (``_pids``: a pids cgroup, v2 or v1, joined before bwrap starts; RLIMIT_NPROC
  when not root; as root without a usable cgroup, the exec helper in front of bwrap as a
  supervisor that counts and kills);
- finds the places that hold credentials (``~/.ssh``, ``~/.aws``, …, plus whatever the caller
  names — the threadloom database directory) hidden under empty mounts (an empty tmpfs, or
  /dev/null for a file); a credential path that is a symlink has its target hidden.

Modes (``sandbox`` in the job file, ``ToolContext.sandbox``): ``auto`` uses bubblewrap when it is
available and otherwise the plain process-group runner; ``required`` refuses to run a command
without it; ``none`` is the plain runner, explicitly. Which program is used can be pointed
elsewhere with ``THREADLOOM_BWRAP`` (a path; a path that does not exist means "not installed").
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ._pids import ProcessLimit

SandboxMode = Literal["auto", "required", "none"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "required", "none")
BWRAP = "bwrap"
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"

CREDENTIAL_PATHS = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".docker",
    ".kube",
    ".config/gh",
    ".config/gcloud",
    ".pypirc",
    ".npmrc",
)
"""Under ``$HOME``: hidden inside the sandbox (an empty directory or an empty file)."""


class SandboxUnavailable(Exception):
    """``sandbox = "required"`` but bubblewrap is missing or does not work here (exit 2)."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    available: bool
    program: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SandboxSettings:
    """A job's sandbox for its workers' ``bash`` (copied into each ``ToolContext``)."""

    mode: SandboxMode = "auto"
    network: bool = False
    hidden: tuple[Path, ...] = ()


def bwrap_program() -> str:
    return os.environ.get("THREADLOOM_BWRAP") or shutil.which(BWRAP) or BWRAP


@functools.cache
def _probe(program: str) -> SandboxStatus:
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        return SandboxStatus(False, program, f"{BWRAP} not found")
    try:
        done = subprocess.run(
            [
                program,
                "--unshare-user",
                "--ro-bind",
                "/",
                "/",
                "--unshare-all",
                "--cap-drop",
                "ALL",
                "--die-with-parent",
                "true",
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return SandboxStatus(False, program, f"{program} does not run: {exc}")
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return SandboxStatus(False, program, f"{program} does not work here: {err[-1:]}")
    return SandboxStatus(True, program)


def sandbox_status() -> SandboxStatus:
    """Whether bubblewrap is installed and works (probed once per program and process)."""
    return _probe(bwrap_program())


def require_sandbox(mode: SandboxMode) -> SandboxStatus:
    """The status for ``mode``; raises ``SandboxUnavailable`` (naming the program) when the mode
    is ``required`` and bubblewrap cannot be used."""
    status = sandbox_status()
    if mode == "required" and not status.available:
        raise SandboxUnavailable(
            f'sandbox = "required" but the sandbox cannot be used: {status.reason}; '
            f'{INSTALL_HINT}, or set sandbox = "auto" or "none"'
        )
    return status


def bwrap_argv(
    program: str,
    command: Sequence[str],
    *,
    workspace: Path,
    limit: ProcessLimit,
    network: bool = False,
    hidden: Sequence[Path] = (),
) -> list[str]:
    """The command line that runs ``command`` in ``workspace`` under the sandbox.

    It is a tiny ``/bin/sh`` wrapper that applies ``limit`` (joins the pids cgroup — a command
    that cannot is not run — or sets RLIMIT_NPROC), opens the seccomp program on fd 9 and
    ``exec``s bubblewrap (same pid: the process group and the exit watcher in ``_bash`` see
    bwrap itself). Under the supervisor the caller puts the exec helper in front of it."""
    ws = str(workspace)
    argv = [
        program,
        "--unshare-user",
        "--uid",
        "0",
        "--gid",
        "0",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    argv += _hide_runtime_dirs(network)
    argv += ["--bind", ws, ws]
    for repo in git_repositories(workspace):
        argv += _git_read_only(repo)
    home = os.environ.get("HOME")
    targets = [Path(home) / p for p in CREDENTIAL_PATHS] if home else []
    for path in [*targets, *hidden]:
        argv += _hide(path)
    argv += ["--unshare-all"]
    if network:
        argv += ["--share-net"]
    argv += ["--cap-drop", "ALL", "--new-session", "--die-with-parent"]
    filter_path = seccomp_filter_file()
    if filter_path is not None:
        argv += ["--seccomp", "9"]
    argv += ["--chdir", ws, "--", *command]
    script = ""
    why = shlex.quote(f"bash: not run: cannot apply the process limit, {limit.describe()}")
    refuse = f"{{ echo {why} >&2; exit 126; }}"
    if limit.how == "cgroup":
        assert limit.group is not None
        procs = shlex.quote(str(limit.group / "cgroup.procs"))
        script += f"echo $$ 2>/dev/null > {procs} || {refuse}; "
    elif limit.how == "nproc":
        n = limit.limit  # dash and ash spell it -p, bash -u (where -p is the pipe size)
        script += f"{{ ulimit -p {n} || ulimit -u {n}; }} 2>/dev/null || {refuse}; "
    script += 'exec "$@"'
    if filter_path is not None:
        script += f" 9< {shlex.quote(str(filter_path))}"
    return ["/bin/sh", "-c", script, "sh", *argv]


RUNTIME_DIRS = ("/run", "/var/run", "/var/lib/docker", "/var/lib/postgresql")
"""Hidden under empty tmpfs mounts: where host services keep their Unix sockets."""


def _hide_runtime_dirs(network: bool) -> list[str]:
    """``/run`` (and ``/var/run`` when it is a directory of its own): no Unix socket of a host
    service is visible. With the network on, a ``/etc/resolv.conf`` that points into ``/run`` is
    bound back (read-only, the file alone) so name resolution still works."""
    argv: list[str] = []
    done: set[str] = set()
    for name in RUNTIME_DIRS:
        try:
            real = os.path.realpath(name)
            if real in done or not os.path.isdir(real):
                continue
        except OSError:
            continue
        done.add(real)
        argv += ["--tmpfs", real]
    if network:
        try:
            resolv = os.path.realpath("/etc/resolv.conf")
            if any(resolv.startswith(d + "/") for d in done) and os.path.isfile(resolv):
                argv += ["--ro-bind", resolv, resolv]
        except OSError:
            pass
    return argv


GIT_SCAN_MAX_DIRS = 20_000
"""How many directories of the workspace are looked through for nested repositories (``sub/.git``,
a worktree or a submodule checked out inside it) before the scan stops: a bound on the cost per
call in a huge tree. The workspace's own ``.git`` is always covered."""
_SCAN_SKIP = frozenset({".git", "node_modules", ".venv", "__pycache__", ".threadloom"})


def git_repositories(workspace: Path) -> list[Path]:
    """The workspace and every directory under it that holds a ``.git`` (directory, file or
    link), found by a bounded scan that follows no symlinks and does not enter ``.git`` itself."""
    found = [workspace]
    stack = [str(workspace)]
    seen = 0
    while stack and seen < GIT_SCAN_MAX_DIRS:
        top = stack.pop()
        seen += 1
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    if entry.name in _SCAN_SKIP:
                        if entry.name == ".git" and top != str(workspace):
                            found.append(Path(top))
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return found


def _git_read_only(workspace: Path) -> list[str]:
    """The workspace's ``.git`` read-only, directory or file (a worktree's), and when it is a
    file, the git dir it names and that dir's common dir too (outside the workspace they are
    read-only anyway; inside, they are made so explicitly)."""
    git = workspace / ".git"
    argv: list[str] = []
    try:
        if git.is_symlink():
            real = git.resolve()
            if real.exists():
                argv += ["--ro-bind", str(real), str(real)]
            return argv
        if not git.exists():
            return argv
        argv += ["--ro-bind", str(git), str(git)]
        if git.is_file():
            text = git.read_text("utf-8", "replace").strip()
            if text.startswith("gitdir:"):
                gitdir = (workspace / text[len("gitdir:") :].strip()).resolve()
                dirs = [gitdir]
                common = gitdir / "commondir"
                if common.is_file():
                    dirs.append((gitdir / common.read_text("utf-8", "replace").strip()).resolve())
                for d in dirs:
                    if d.is_dir():
                        argv += ["--ro-bind", str(d), str(d)]
    except OSError:
        pass
    return argv


def _hide(path: Path) -> list[str]:
    """Mounts that make ``path`` unreadable inside the sandbox (nothing if it does not exist:
    bubblewrap cannot create a mount point on the read-only root). A symlink is followed: what
    it points to is hidden (a mount on the link's path lands on its target anyway)."""
    try:
        if path.is_symlink():
            path = path.resolve()
        if path.is_dir():
            return ["--tmpfs", str(path)]
        if path.exists():
            return ["--ro-bind", "/dev/null", str(path)]
    except (OSError, RuntimeError):
        return []
    return []


# --- the seccomp program: no AF_UNIX sockets ------------------------------------------------

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYS_SOCKET = {"x86_64": 41, "aarch64": 198}
_SYS_IO_URING_SETUP = 425  # the same on both; io_uring can make sockets (IORING_OP_SOCKET)
_X32_BIT = 0x40000000
_AF_UNIX = 1
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06


def seccomp_program(machine: str) -> bytes:
    """A classic BPF seccomp filter (``struct sock_filter`` array) for ``machine``: any other
    audit arch (and x32 on x86_64) gets EPERM for every call; ``socket(AF_UNIX, …)`` and
    ``io_uring_setup`` get EPERM; everything else is allowed (``socketpair`` included)."""
    arch = _AUDIT_ARCH[machine]
    nr_socket = _SYS_SOCKET[machine]

    def ins(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("<HBBI", code, jt, jf, k)

    prog = [
        ins(_LD_W_ABS, 0, 0, 4),  # 0: A = arch
        ins(_JEQ_K, 0, 7, arch),  # 1: foreign arch -> 9 (deny)
        ins(_LD_W_ABS, 0, 0, 0),  # 2: A = nr
        ins(_JGE_K, 6, 0, _X32_BIT),  # 3: x32 -> 10 (deny)
        ins(_JEQ_K, 5, 0, _SYS_IO_URING_SETUP),  # 4: -> 10 (deny)
        ins(_JEQ_K, 0, 2, nr_socket),  # 5: not socket -> 8 (allow)
        ins(_LD_W_ABS, 0, 0, 16),  # 6: A = low word of args[0] (the family)
        ins(_JEQ_K, 1, 0, _AF_UNIX),  # 7: AF_UNIX -> 9 (deny)
        ins(_RET_K, 0, 0, _RET_ALLOW),  # 8
        ins(_RET_K, 0, 0, _RET_EPERM),  # 9
        ins(_RET_K, 0, 0, _RET_EPERM),  # 10
    ]
    return b"".join(prog)


@functools.cache
def seccomp_filter_file() -> Path | None:
    """The compiled filter in a private file (made once per process), or None on a machine
    this module has no syscall table for (then only the hidden ``/run`` guards sockets)."""
    machine = platform.machine()
    if machine not in _AUDIT_ARCH or sys.byteorder != "little":
        return None
    path = Path(tempfile.mkdtemp(prefix="threadloom-seccomp-")) / "no-unix-sockets.bpf"
    path.write_bytes(seccomp_program(machine))
    return path
