"""``threadloom run`` on a real pseudo-terminal (issue 10 item 12): while a worker's ``bash``
call runs, its row keeps ticking — the live view redraws on its own, not only on events — and
the report at the end is rendered Markdown."""

from __future__ import annotations

import re

from tests._terminal import run_on_terminal
from tests.e2e.conftest import Env, bash, submit

CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _run_on_a_terminal(env: Env, *args: str, columns: int = 120) -> tuple[int, str]:
    return run_on_terminal(
        "--db",
        str(env.db),
        *args,
        cwd=env.root,
        columns=columns,
        env={"COLUMNS": str(columns), "LINES": "40", "TERM": "xterm-256color"},
    )


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
