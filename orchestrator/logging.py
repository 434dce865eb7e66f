"""Logging: structlog, configured once at the top of the command line (or of an embedding app).

Logs go to stderr — stdout is reserved for command output — human-readable by default, as JSON
lines with ``json_lines=True`` (``threadloom --log-json``). The level is WARNING, INFO with one
``-v``, DEBUG with two (for our events; other libraries' loggers stop at INFO). Events are dotted
past-tense names with fields (``log.info("thread.imported", thread=ref, messages=12)``); prompt
bodies never above DEBUG. Standard-library loggers (alembic, …) go through the same renderer.
Every rendered line — structlog's, the standard library's, the job logs' — passes through
``workers.redact`` on its way out (tracebacks included), so no secret is logged.

Job logs: once ``set_job_log_dir(dir)`` is called (``threadloom run``/``resume``/``fork``/``demo``
do, with ``.threadloom/logs`` beside the database), every event carrying a ``job`` (bound with
contextvars at the top of each thread's run) is also appended, at INFO and above whatever the
console level, as one JSON line to ``<dir>/<job ref>.jsonl``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any, TextIO, cast

import structlog

from workers import redact

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
    out = cast(TextIO, _CurrentStderr()) if stream is None else stream
    level = level_for(int(verbose))
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    shared.append(_JOB_LOG)
    _JOB_LOG.console_level = level
    renderer: Any
    if json_lines:
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        # a crash on the console is one line naming where the traceback went; the traceback
        # itself (no locals: they hold prompts and outputs) only with -v
        formatter = structlog.dev.plain_traceback if int(verbose) >= 1 else _brief_exception
        renderer = structlog.dev.ConsoleRenderer(colors=_isatty(out), exception_formatter=formatter)
    renderer = _Redacting(renderer)
    structlog.configure(
        processors=[*shared, renderer],
        # INFO always reaches the processors (for the job logs); _JobLog drops what the console
        # should not show
        wrapper_class=structlog.make_filtering_bound_logger(min(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )

    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[*shared[1:-1], structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    # other libraries' DEBUG chatter (aiosqlite logs every call) stays out even with -vv
    root.setLevel(max(level, logging.INFO))


def _brief_exception(sio: TextIO, exc_info: Any) -> None:
    exc = exc_info[1] if isinstance(exc_info, tuple) else None
    summary = f"{type(exc).__name__}: {' '.join(str(exc).split())}" if exc else "an exception"
    where = _JOB_LOG.current_path()
    shown = f"the traceback is in {where}" if where else "-v shows the traceback"
    sio.write(f"\n  {summary[:300]} ({shown})")


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)


class _Redacting:
    """The last processor: the renderer, then ``redact`` over the whole rendered line."""

    def __init__(self, renderer: Any) -> None:
        self.renderer = renderer

    def __call__(self, logger: Any, method: str, event: Any) -> Any:
        rendered = self.renderer(logger, method, event)
        return redact(rendered) if isinstance(rendered, str) else rendered


class _JobLog:
    """A structlog processor: tees job events to their JSON-lines file, then drops events below
    the console level."""

    def __init__(self) -> None:
        self.directory: Path | None = None
        self.console_level = logging.WARNING
        self._files: dict[str, TextIO] = {}
        self._last_job: str | None = None

    def current_path(self) -> Path | None:
        """The job log most recently written to, if any."""
        if self.directory is None or self._last_job is None:
            return None
        return self.directory / f"{self._last_job}.jsonl"

    def __call__(self, _logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        job = event.get("job")
        if self.directory is not None and isinstance(job, str) and job.startswith("T-"):
            self._last_job = job
            exc_info = event.get("exc_info")
            # the log keeps the whole traceback as text (the console shows one line)
            self._write(job, {**event, "exc_info": _format_exc(exc_info)} if exc_info else event)
        if logging.getLevelNamesMapping().get(method.upper(), logging.INFO) < self.console_level:
            raise structlog.DropEvent
        return event

    def _write(self, job: str, event: dict[str, Any]) -> None:
        try:
            fh = self._files.get(job)
            if fh is None:
                assert self.directory is not None
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                path = self.directory / f"{job}.jsonl"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                fh = self._files[job] = os.fdopen(fd, "a", encoding="utf-8")
            fh.write(redact(json.dumps(event, default=str, ensure_ascii=False)) + "\n")
            fh.flush()
        except OSError:
            pass  # a log that cannot be written never stops a job

    def close(self) -> None:
        for fh in self._files.values():
            try:
                fh.close()
            except OSError:
                pass
        self._files.clear()


def _format_exc(exc_info: Any) -> str:
    if exc_info is True:
        exc_info = sys.exc_info()
    if isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    if isinstance(exc_info, tuple) and exc_info[0] is not None:
        return "".join(traceback.format_exception(*exc_info))
    return str(exc_info)


_JOB_LOG = _JobLog()


def set_job_log_dir(directory: Path | None) -> None:
    """Where per-job JSON-lines logs go (None: nowhere)."""
    _JOB_LOG.close()
    _JOB_LOG.directory = directory


class _CurrentStderr(io.TextIOBase):
    """Whatever ``sys.stderr`` is at the time of each write: a test runner (or an embedding
    app) may swap it after logging was configured, and a log line must never hit a closed
    stream."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return _isatty(sys.stderr)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
