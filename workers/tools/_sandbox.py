"""The OS sandbox for ``bash``: bubblewrap (``bwrap``) when it is installed and works.

Under the sandbox a command sees the whole filesystem read-only except the workspace (writable,
its ``.git`` read-only) and a private, empty ``/tmp``; it has its own PID namespace (when the
command's shell exits, the kernel kills everything it left behind, ``setsid`` or not), no network
unless the job sets ``network = true`` (a fresh network namespace with only loopback), and the
places that hold credentials (``~/.ssh``, ``~/.aws``, …, plus whatever the caller names — the
threadloom database directory) hidden under empty mounts (an empty tmpfs, or /dev/null for a
file). ``--die-with-parent``: if threadloom itself dies, the sandboxed command dies with it.

Modes (``sandbox`` in the job file, ``ToolContext.sandbox``): ``auto`` uses bubblewrap when it is
available and otherwise the plain process-group runner; ``required`` refuses to run a command
without it; ``none`` is the plain runner, explicitly. Which program is used can be pointed
elsewhere with ``THREADLOOM_BWRAP`` (a path; a path that does not exist means "not installed").
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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
            [program, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
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
    network: bool = False,
    hidden: Sequence[Path] = (),
) -> list[str]:
    """The bubblewrap command line that runs ``command`` in ``workspace`` under the sandbox."""
    ws = str(workspace)
    argv = [
        program,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--bind",
        ws,
        ws,
    ]
    git = workspace / ".git"
    if git.exists():
        argv += ["--ro-bind", str(git), str(git)]
    home = os.environ.get("HOME")
    targets = [Path(home) / p for p in CREDENTIAL_PATHS] if home else []
    for path in [*targets, *hidden]:
        argv += _hide(path)
    argv += ["--unshare-all"]
    if network:
        argv += ["--share-net"]
    argv += ["--die-with-parent", "--chdir", ws, "--", *command]
    return argv


def _hide(path: Path) -> list[str]:
    """Mounts that make ``path`` unreadable inside the sandbox (nothing if it does not exist:
    bubblewrap cannot create a mount point on the read-only root)."""
    try:
        if path.is_symlink():
            return []
        if path.is_dir():
            return ["--tmpfs", str(path)]
        if path.exists():
            return ["--ro-bind", "/dev/null", str(path)]
    except OSError:
        return []
    return []
