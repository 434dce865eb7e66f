"""Logging: structlog, configured once at the top of the command line (or of an embedding app).

Logs go to stderr — stdout is reserved for command output — human-readable by default, as JSON
lines with ``json_lines=True`` (``threadloom --log-json``). The level is WARNING, INFO with one
``-v``, DEBUG with two. Events are dotted past-tense names with fields
(``log.info("thread.imported", thread=ref, messages=12)``); prompt bodies never above DEBUG.
Standard-library loggers (alembic, …) are rendered by the same processors.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_HANDLER_NAME = "threadloom"


def level_for(verbosity: int) -> int:
    if verbosity >= 2:
        return logging.DEBUG
    if verbosity == 1:
        return logging.INFO
    return logging.WARNING


def configure_logging(
    verbose: int | bool = 0, json_lines: bool = False, *, stream: TextIO | None = None
) -> None:
    """Configure structlog and the standard library's root logger. Calling it again replaces
    the previous configuration (so tests can run several commands in one process)."""
    out = sys.stderr if stream is None else stream
    level = level_for(int(verbose))
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if json_lines:
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=_isatty(out))
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )

    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[*shared[1:], structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
