"""The bash tool: process-group cleanup on exit, timeout and cancellation; bounded memory for
large outputs; a scrubbed environment; exit codes — with real subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from workers.tools import BashTool, ToolContext, ToolOutput, scrubbed_environment


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return ToolContext(workspace=ws)


def _stat_fields(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a live process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[2])


def group_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are still running (zombies do not count: they are dead,
    only not yet reaped by whoever inherited them)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _stat_fields(int(entry))
            if info is not None and info[1] == pgid and info[0] != "Z":
                members.append(int(entry))
    return members


def wait_until_dead(pids: Iterable[int], timeout: float = 5.0) -> list[int]:
    """Wait on each process's exit event (a pidfd becomes readable when it terminates); return
    the ones still running after ``timeout``."""
    survivors = []
    deadline = time.monotonic() + timeout
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready and (_stat_fields(pid) or ("Z", 0))[0] != "Z":
                survivors.append(pid)
        finally:
            os.close(fd)
    return survivors


def assert_group_dead(pgid: int, pids: Iterable[int] = ()) -> None:
    assert wait_until_dead([*pids, *group_members(pgid)]) == []
    assert group_members(pgid) == []


async def test_timeout_kills_the_whole_group_and_returns_promptly(
    ws: Path, ctx: ToolContext
) -> None:
    command = (
        "echo $PPID > pids; sleep 300 & echo $! >> pids; sleep 300 & echo $! >> pids; "
        "echo started; sleep 300"
    )
    started = time.monotonic()
    out = await BashTool().invoke({"command": command, "timeout_s": 1}, ctx)
    elapsed = time.monotonic() - started
    assert elapsed < 5, elapsed
    assert out.is_error
    assert out.text.startswith("started\n")
    assert out.text.endswith("[timed out after 1 s; the command's process group was killed]")
    pgid, *children = (int(line) for line in (ws / "pids").read_text().split())
    assert len(children) == 2
    assert_group_dead(pgid, children)


async def test_default_timeout_comes_from_the_context(ws: Path) -> None:
    ctx = ToolContext(workspace=ws, default_timeout_s=0.5)
    out = await BashTool().invoke({"command": "sleep 300"}, ctx)
    assert out.is_error
    assert "timed out after 0.5 s" in out.text


async def test_background_child_is_killed_when_the_command_exits(
    ws: Path, ctx: ToolContext
) -> None:
    started = time.monotonic()
    out = await BashTool().invoke({"command": "sleep 300 >/dev/null 2>&1 & echo $PPID $!"}, ctx)
    assert time.monotonic() - started < 5
    assert not out.is_error
    pgid, child = (int(x) for x in out.text.splitlines()[0].split())
    assert out.text.endswith("[exit code: 0]")
    assert_group_dead(pgid, [child])


async def test_background_child_holding_the_output_pipe_does_not_hang_the_call(
    ws: Path, ctx: ToolContext
) -> None:
    started = time.monotonic()
    out = await BashTool().invoke({"command": "sleep 300 & echo $PPID $!; echo done"}, ctx)
    assert time.monotonic() - started < 5
    pgid, child = (int(x) for x in out.text.splitlines()[0].split())
    assert out.text.endswith("done\n[exit code: 0]")
    assert_group_dead(pgid, [child])


async def test_a_process_that_left_the_group_does_not_outlive_the_command(
    ws: Path, ctx: ToolContext
) -> None:
    # The FIFO makes the shell wait until the escaped process really is in its own session. The
    # plain runner's exec helper is a subreaper: it kills it when the shell exits, so the pipe
    # it holds closes and nothing is waited for.
    command = (
        "mkfifo escaped; setsid sh -c 'echo $$ > escaped; exec sleep 300' & "
        "read pid < escaped; echo $pid"
    )
    out = await BashTool().invoke({"command": command}, ctx)
    escaped = int(out.text.splitlines()[0])
    try:
        info = _stat_fields(escaped)
        assert info is None or info[0] == "Z", info  # killed (and reaped) already
        assert "[stopped reading" not in out.text
        assert out.text.endswith("[exit code: 0]")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(escaped, signal.SIGKILL)


async def test_cancellation_kills_the_group_and_propagates(ws: Path, ctx: ToolContext) -> None:
    os.mkfifo(ws / "ready")
    command = "sleep 300 & echo $PPID $! > ready; sleep 300"
    task = asyncio.create_task(BashTool().invoke({"command": command}, ctx))
    # Reading the FIFO blocks until the command has written its ids: an event, not a sleep.
    ids = await asyncio.wait_for(asyncio.to_thread((ws / "ready").read_text), timeout=30)
    pgid, child = (int(x) for x in ids.split())
    assert group_members(pgid)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_group_dead(pgid, [child])


_MEMORY_PROBE = r"""
import asyncio, json, resource, sys
from pathlib import Path
from workers.tools import BashTool, ToolContext
size = int(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
out = asyncio.run(BashTool().invoke(
    {"command": f"head -c {size} /dev/zero | tr '\\0' a"}, ToolContext(workspace=Path(sys.argv[1]))
))
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"grown_mib": grown, "is_error": out.is_error, "len": len(out.text),
                  "a": out.text.count("a"), "end": out.text[-20:]}))
"""


def test_large_output_is_returned_whole_with_bounded_memory(ws: Path) -> None:
    # ru_maxrss is a high-water mark: measured in a fresh process, so what earlier tests of this
    # session used cannot hide growth (nor a later high mark blame this test).
    size = 50_000_000
    root = Path(__file__).resolve().parents[2]
    probe = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, str(ws), str(size)],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(probe.stdout)
    assert not result["is_error"]
    assert result["len"] == size + len("\n[exit code: 0]")
    assert result["end"].endswith("a\n[exit code: 0]")
    assert result["a"] == size
    assert result["grown_mib"] < 400, result["grown_mib"]


async def test_output_beyond_the_cap_keeps_head_and_tail_around_a_marker(
    ws: Path, ctx: ToolContext
) -> None:
    out = await BashTool(output_cap_bytes=1000).invoke({"command": "seq 1 10000"}, ctx)
    total = sum(len(f"{i}\n") for i in range(1, 10001))
    head, marker, tail = re.split(r"\n\[… (\d+) bytes of output omitted …\]\n", out.text)
    assert head.startswith("1\n2\n3\n")
    assert len(head.encode()) == 500
    assert tail.endswith("9999\n10000\n[exit code: 0]")
    assert len(tail.encode()) == 500 + len("[exit code: 0]")
    assert int(marker) == total - 1000


async def test_environment_has_no_credentials(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "MY_SECRET", "aws_key_id"):
        monkeypatch.setenv(name, "hunter2")
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    ctx = ToolContext(workspace=ws, env={"EXTRA_TOKEN": "hunter2", "EXTRA_OK": "yes"})
    out = await BashTool().invoke({"command": "env"}, ctx)
    names = [line.split("=", 1)[0] for line in out.text.splitlines() if "=" in line]
    assert "HARMLESS_SETTING" in names
    assert "EXTRA_OK" in names
    assert "PATH" in names
    for name in names:
        assert not any(marker in name.upper() for marker in ("KEY", "SECRET", "TOKEN", "PASSWORD"))
    assert "hunter2" not in out.text


def test_scrubbed_environment_merges_then_filters_case_insensitively() -> None:
    env = scrubbed_environment(
        {"PATH": "/bin", "api_key": "x", "Session_Token": "y"},
        {"EXTRA": "1", "PATH": "/usr/bin", "my_password": "z"},
    )
    assert env == {"PATH": "/usr/bin", "EXTRA": "1"}


async def test_non_zero_exit_is_a_normal_result_with_the_code(ctx: ToolContext) -> None:
    out = await BashTool().invoke({"command": "echo oops >&2; exit 7"}, ctx)
    assert out == ToolOutput("oops\n[exit code: 7]")


async def test_stdout_and_stderr_are_merged_in_order(ctx: ToolContext) -> None:
    out = await BashTool().invoke({"command": "echo out; echo err >&2; echo out2"}, ctx)
    assert out.text == "out\nerr\nout2\n[exit code: 0]"


async def test_output_without_final_newline_and_no_output(ctx: ToolContext) -> None:
    assert (await BashTool().invoke({"command": "printf abc"}, ctx)).text == ("abc\n[exit code: 0]")
    assert (await BashTool().invoke({"command": "true"}, ctx)).text == (
        "(no output)\n[exit code: 0]"
    )


async def test_runs_in_the_workspace_with_empty_stdin(ws: Path, ctx: ToolContext) -> None:
    out = await BashTool().invoke({"command": "pwd; cat; echo end"}, ctx)
    assert out.text == f"{ws}\nend\n[exit code: 0]"


async def test_shell_killed_by_a_signal_reports_it(ctx: ToolContext) -> None:
    out = await BashTool().invoke({"command": "kill -TERM $$"}, ctx)
    assert out.text.endswith("[exit code: -15 (killed by SIGTERM)]")
    assert not out.is_error


async def test_timeout_above_the_maximum_is_invalid_input(ctx: ToolContext) -> None:
    out = await BashTool().invoke({"command": "true", "timeout_s": 601}, ctx)
    assert out.is_error
    assert "timeout_s: Input should be less than or equal to 600" in out.text


async def test_failure_to_start_is_an_error_result(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path / "does-not-exist")
    out = await BashTool().invoke({"command": "true"}, ctx)
    assert out.is_error
    assert out.text.startswith("bash: failed to start:")
