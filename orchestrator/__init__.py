"""The orchestrator: the lead, dispatch, jobs, budgets, the CLI and the Python API.

Public names are loaded on first access, so ``threadloom --help`` (which imports
``orchestrator.cli``) does not pay for the store, the runtime or any SDK.

Layers point one way: ``cli`` (and the other front doors, ``mcp``, ``web``) → ``api`` (and
``session``, which runs) → ``runtime`` → ``isolation``; ``errors``, ``views`` and ``jobs`` are
leaves any layer may use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import Orchestrator
    from .errors import JobFileError, ReadError
    from .jobs import JobSpec, TaskSpec, WorkerDefaults, load_job, parse_job
    from .outcomes import AskOutcome, JobOutcome, WorkerSummary
    from .runtime.job import JobRuntime
    from .runtime.pages import Page, read_page
    from .session import JobSession, Run

_WHERE = {
    "AskOutcome": ".outcomes",
    "JobFileError": ".errors",
    "JobOutcome": ".outcomes",
    "JobRuntime": ".runtime.job",
    "JobSession": ".session",
    "JobSpec": ".jobs",
    "Orchestrator": ".api",
    "Page": ".runtime.pages",
    "ReadError": ".errors",
    "Run": ".session",
    "TaskSpec": ".jobs",
    "WorkerDefaults": ".jobs",
    "WorkerSummary": ".outcomes",
    "load_job": ".jobs",
    "parse_job": ".jobs",
    "read_page": ".runtime.pages",
}

__all__ = [
    "AskOutcome",
    "JobFileError",
    "JobOutcome",
    "JobRuntime",
    "JobSession",
    "JobSpec",
    "Orchestrator",
    "Page",
    "ReadError",
    "Run",
    "TaskSpec",
    "WorkerDefaults",
    "WorkerSummary",
    "load_job",
    "parse_job",
    "read_page",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
