"""The ``threadloom`` command (the console script and ``python -m orchestrator``).

``ls``, ``show``, ``search`` and ``tree`` are answered on the read-only fast path (``_fast``)
before click, SQLAlchemy or pydantic is imported; every other command line, or one the fast
path declines (it then writes nothing), runs through the click group (``_app``). Before either,
the secrets leave the process's environment (``workers._secrets.take_secrets``): every command —
``run``, ``mcp``, ``serve``, ``worker`` … — starts here, as the console script or as
``python -m orchestrator``.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

NATIVE_THREADS = "temporalio.bridge.temporal_sdk_bridge"
"""The Temporal SDK's Rust core: once loaded, its Tokio threads may call into Python while the
interpreter finalizes, which aborts the process (SIGABRT, "PyGILState_Release: thread state …
must be current", temporalio/sdk-python#300) after the command has already done its work."""


def main() -> None:
    from workers import take_secrets

    # first of all: no secret stays in this process's environment (nor in what it spawns),
    # where a worker's bash running as root could read it from /proc (workers._secrets)
    take_secrets()

    from ._fast import run_standalone
    from ._render import safe_streams

    safe_streams()
    code = run_standalone(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from ._app import main as cli_main

    try:
        cli_main(prog_name="threadloom")
    except SystemExit as done:
        _leave(done)


def _leave(done: SystemExit) -> NoReturn:
    """End with ``done``'s code. A process that loaded the Temporal core runs its exit handlers,
    flushes its streams, and ends without the interpreter's finalization (see NATIVE_THREADS), so
    the exit code is the command's, not an abort's."""
    if NATIVE_THREADS not in sys.modules:
        raise done
    code = done.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    # what finalization does before the part that aborts: join the non-daemon threads, run atexit
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code or 0)
