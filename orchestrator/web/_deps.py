"""The ``web`` extra, checked before anything is opened: a missing library is one clear line
(exit 2 at the command line), never an ImportError traceback halfway through a request."""

from __future__ import annotations

import importlib.util

INSTALL = "pip install 'threadloom[web]'"


class WebUnavailable(Exception):
    """A library of the ``web`` extra is not installed; the message names the install command."""


def require_web(what: str, *, server: bool = False) -> None:
    """Raise ``WebUnavailable`` unless Jinja2 and markdown-it-py (and, for a ``server``,
    Starlette and uvicorn) can be imported. ``what`` names the command for the message
    (``serve``, ``export``)."""
    needed = ["jinja2", "markdown_it"] + (["starlette", "uvicorn"] if server else [])
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise WebUnavailable(
            f"{what}: the web viewer needs {', '.join(missing)}, not installed: {INSTALL}"
        )
