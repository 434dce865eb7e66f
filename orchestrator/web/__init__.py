"""The web viewer: a read-only, server-rendered view of every thread (SPEC §Web viewer).

A front door over the orchestrator's API, like the CLI and the MCP server. Starlette, Jinja2
and uvicorn are the optional ``web`` extra: nothing imports them until a page is served or an
HTML export is written, so ``threadloom`` without the extra still starts, and ``serve`` or
``export --format html`` fails with one line naming the install command (``require_web``).

- ``create_app(db)`` — the ASGI application (``/``, ``/t/T-…``, ``/job/T-…``, ``/search``);
- ``serve(db, host=, port=)`` — runs it with uvicorn, bound to 127.0.0.1 unless told otherwise;
- ``write_thread_html(store, write, ref)`` — the thread page as one self-contained file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._deps import WebUnavailable, require_web

if TYPE_CHECKING:
    from ._app import create_app, serve
    from ._export import write_thread_html

_WHERE = {
    "create_app": "._app",
    "serve": "._app",
    "write_thread_html": "._export",
}

__all__ = [
    "WebUnavailable",
    "create_app",
    "require_web",
    "serve",
    "write_thread_html",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
