"""The engine: how a job's threads are created (``threads``) and run (``job.JobRuntime``), the
lead's tools (``lead_tools``), bounded pages of a transcript (``pages``) and the lead's and
readers' prompts (``prompts``). Every thread runs through ``workers.run_thread``.

It sits between ``orchestrator.api`` (above) and ``orchestrator.isolation`` (below), and never
imports a front door (``orchestrator.cli``, ``mcp``, ``web``). Its names load on first access,
so ``runtime.pages`` alone (what reading needs) does not import the worker loop.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .job import JobRuntime, ModelFactory, ModelKey, model_key, run_workspace
    from .ledger import Ledger, check_lead_context, handoff_ledger, job_ledger
    from .pages import DEFAULT_MAX_CHARS, Mode, Page, read_page
    from .threads import check_message, create_lead, fork_point, job_of

_WHERE = {
    "DEFAULT_MAX_CHARS": ".pages",
    "JobRuntime": ".job",
    "Ledger": ".ledger",
    "Mode": ".pages",
    "ModelFactory": ".job",
    "ModelKey": ".job",
    "Page": ".pages",
    "check_lead_context": ".ledger",
    "check_message": ".threads",
    "create_lead": ".threads",
    "fork_point": ".threads",
    "handoff_ledger": ".ledger",
    "job_ledger": ".ledger",
    "job_of": ".threads",
    "model_key": ".job",
    "read_page": ".pages",
    "run_workspace": ".job",
}

__all__ = [
    "DEFAULT_MAX_CHARS",
    "JobRuntime",
    "Ledger",
    "Mode",
    "ModelFactory",
    "ModelKey",
    "Page",
    "check_lead_context",
    "check_message",
    "create_lead",
    "fork_point",
    "handoff_ledger",
    "job_ledger",
    "job_of",
    "model_key",
    "read_page",
    "run_workspace",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
