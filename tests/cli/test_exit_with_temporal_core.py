"""A command whose process loaded the Temporal SDK's Rust core ends with its own exit code.

The core's Tokio threads may call into Python while the interpreter finalizes; the process then
aborts (SIGABRT or SIGSEGV, "PyGILState_Release: thread state … must be current",
temporalio/sdk-python#300) after the command has done its work, and a refused ``resume`` (exit 2)
reads as a crash. Under load this hit about one exit in nine here. The command line ends such a
process itself once its exit handlers have run (``orchestrator.cli._entry._leave``); these tests
hold what that ending must keep: the command's code, its flushed output, the exit handlers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.orchestrator.test_cli_helpers import clean_env

SCRIPT = """
import atexit, sys
from temporalio.runtime import Runtime

Runtime.default()  # the core and its threads, as a client's connect starts them
marker, db, *argv = sys.argv[1:]
atexit.register(lambda: open(marker, "w").write("exit handlers ran"))
sys.argv = ["threadloom", "--db", db, *argv]
from orchestrator.cli._entry import main

main()
"""


def _run(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    marker = tmp_path / "atexit.txt"
    db = tmp_path / "t.db"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(marker), str(db), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    return proc, marker


def test_a_refused_command_ends_with_its_code_and_its_line(tmp_path: Path) -> None:
    proc, marker = _run(tmp_path, "resume", "T-0000", "more please")
    assert proc.returncode == 3, proc.stderr  # not found: the command's code, not an abort's
    assert proc.stderr.startswith("threadloom: error: no database at") and "t.db" in proc.stderr
    assert "Fatal Python error" not in proc.stderr
    assert marker.read_text() == "exit handlers ran"


def test_a_command_that_succeeds_flushes_what_it_wrote(tmp_path: Path) -> None:
    proc, marker = _run(tmp_path, "--json", "stats")
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), dict)  # the whole document, flushed
    assert marker.read_text() == "exit handlers ran"
