"""``threadloom`` run on a real terminal: a child on a pty (``pty.fork``), its output read until
it closes the terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import sys
import termios
from collections.abc import Mapping
from pathlib import Path


def run_on_terminal(
    *args: str,
    cwd: Path | None = None,
    columns: int | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """(exit code, what it wrote) of ``python -m orchestrator ARGS…`` on a pty: without
    ``THREADLOOM_DB`` and ``NO_COLOR``, with ``env`` added; ``columns``: the terminal's width
    (40 lines), as the kernel reports it."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        if columns is not None:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        if cwd is not None:
            os.chdir(cwd)
        os.environ.pop("THREADLOOM_DB", None)
        os.environ.pop("NO_COLOR", None)
        os.environ.update(env or {})
        os.execv(sys.executable, [sys.executable, "-m", "orchestrator", *args])
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")
