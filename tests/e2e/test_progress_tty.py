"""``threadloom run`` on a real pseudo-terminal (issue 10 item 12): while a worker's ``bash``
call runs, its row keeps ticking — the live view redraws on its own, not only on events — and
the report at the end is rendered Markdown."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import sys
import termios

from tests.e2e.conftest import Env, bash, submit

CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _run_on_a_terminal(env: Env, *args: str, columns: int = 120) -> tuple[int, str]:
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        os.chdir(env.root)
        os.environ.pop("THREADLOOM_DB", None)
        os.environ.pop("NO_COLOR", None)
        os.environ.update(COLUMNS=str(columns), LINES="40", TERM="xterm-256color")
        os.execv(
            sys.executable,
            [sys.executable, "-m", "orchestrator", "--db", str(env.db), *args],
        )
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


def test_a_long_bash_call_ticks_on_the_terminal_and_the_report_is_rendered(env: Env) -> None:
    job = env.job(
        "tick",
        [
            {"match": "Job: tick", "turns": [{"text": "# Tick report\n\nThe **sleep** ended."}]},
            {"match": "(?m)^Task a:", "turns": [bash("sleep 2"), submit("slept")]},
        ],
        [{"id": "a", "title": "Sleep a little", "prompt": "sleep"}],
    )
    code, out = _run_on_a_terminal(env, "run", str(job))
    assert code == 0, out[-2000:]
    plain = CSI.sub("", out).replace("\r", "\n")
    # every time the sleeping worker's row was drawn, with the elapsed time it showed
    shown = re.findall(r"(T-[0-9a-z]{26}) .*Sleep a little .*bash: sleep 2 .* (\d+s)$", plain, re.M)
    refs = {ref for ref, _ in shown}
    assert len(refs) == 1, plain[-3000:]
    assert len({elapsed for _, elapsed in shown}) >= 2, shown
    # the report: rendered (no literal "#"), then the workers as plain lines
    lines = [line.strip() for line in plain.splitlines()]
    assert "Tick report" in lines and "# Tick report" not in plain, plain[-1500:]
    assert "**sleep**" not in plain and "The sleep ended." in lines
