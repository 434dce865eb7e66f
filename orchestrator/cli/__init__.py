"""The ``threadloom`` command line (also ``python -m orchestrator``): presentation only — parse,
call ``orchestrator.api`` (or the store, for what only the CLI shows), render. The one importer
of ``click`` and ``rich`` in the product.

- ``_entry`` — the console script: the read-only fast path (``_fast``) for ``ls``/``show``/
  ``search``/``tree`` before click is imported, else the click group;
- ``_app`` — the group, global options, ``Output``, ``run_command``, error reporting;
- ``registry`` — the commands (one line each), loaded when named;
- ``_cmd_*`` — the commands; ``_render``, ``_read_views``, ``_thread_text``, ``_progress``,
  ``_report`` — text for the terminal.

This package's names load on first access (nothing here imports click until a name from
``_app`` is asked for), so the fast path pays only for what it uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import (
        AppContext,
        Command,
        Output,
        ThreadloomGroup,
        command,
        emit,
        get_app,
        main,
        open_store,
        report_error,
        run_async,
        run_command,
    )
    from .registry import COMMANDS

_WHERE = {
    "COMMANDS": ".registry",
    "AppContext": "._app",
    "Command": "._app",
    "Output": "._app",
    "ThreadloomGroup": "._app",
    "command": "._app",
    "emit": "._app",
    "get_app": "._app",
    "main": "._app",
    "open_store": "._app",
    "report_error": "._app",
    "run_async": "._app",
    "run_command": "._app",
}

__all__ = [
    "COMMANDS",
    "AppContext",
    "Command",
    "Output",
    "ThreadloomGroup",
    "command",
    "emit",
    "get_app",
    "main",
    "open_store",
    "report_error",
    "run_async",
    "run_command",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
