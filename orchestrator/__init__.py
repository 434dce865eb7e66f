"""The orchestrator: the lead, dispatch, jobs, budgets, the CLI and the Python API.

Public names are loaded on first access, so ``threadloom --help`` (which imports
``orchestrator.cli``) does not pay for the store, the runtime or any SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._api import JobOutcome, Orchestrator, WorkerSummary
    from ._jobfile import JobFileError, JobSpec, TaskSpec, WorkerDefaults, load_job, parse_job
    from ._reading import Page, ReadError, read_page
    from ._runtime import JobRuntime

_WHERE = {
    "JobFileError": "._jobfile",
    "JobOutcome": "._api",
    "JobRuntime": "._runtime",
    "JobSpec": "._jobfile",
    "Orchestrator": "._api",
    "Page": "._reading",
    "ReadError": "._reading",
    "TaskSpec": "._jobfile",
    "WorkerDefaults": "._jobfile",
    "WorkerSummary": "._api",
    "load_job": "._jobfile",
    "parse_job": "._jobfile",
    "read_page": "._reading",
}

__all__ = [
    "JobFileError",
    "JobOutcome",
    "JobRuntime",
    "JobSpec",
    "Orchestrator",
    "Page",
    "ReadError",
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
