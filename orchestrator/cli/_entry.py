"""The ``threadloom`` command (the console script and ``python -m orchestrator``).

``ls``, ``show``, ``search`` and ``tree`` are answered on the read-only fast path (``_fast``)
before click, SQLAlchemy or pydantic is imported; every other command line, or one the fast
path declines (it then writes nothing), runs through the click group (``_app``). Before either,
the secrets leave the process's environment (``store._secrets.take_secrets``): every command —
``run``, ``mcp``, ``serve``, ``worker`` … — starts here, as the console script or as
``python -m orchestrator``.
"""

from __future__ import annotations

import sys


def main() -> None:
    from store import take_secrets

    # first of all: no secret stays in this process's environment (nor in what it spawns),
    # where a worker's bash running as root could read it from /proc (store._secrets)
    take_secrets()

    from ._fast import run_standalone
    from ._render import safe_streams

    safe_streams()
    code = run_standalone(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from ._app import main as cli_main

    cli_main(prog_name="threadloom")
