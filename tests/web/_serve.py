"""``threadloom serve`` as a user runs it: the real command in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tests.orchestrator.test_cli_helpers import clean_env


@contextmanager
def serving(db: str, *args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``threadloom --db DB ARGS…`` (``serve`` among them) and the first line it writes on
    stderr (where it serves, or why it cannot); killed when the block ends, if it still runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "--db", db, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        assert proc.stderr is not None
        yield proc.stderr.readline(), proc  # blocks until it says where it is, or why not
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
