"""The engine: how a job's threads are created (``threads``) and run (``job.JobRuntime``), the
lead's tools (``lead_tools``), bounded pages of a transcript (``pages``) and the lead's and
readers' prompts (``prompts``). Every thread runs through ``workers.run_thread``.

It sits between ``orchestrator.api`` (above) and ``orchestrator.isolation`` (below), and never
imports a front door (``orchestrator.cli``, ``mcp``, ``web``).
"""

from __future__ import annotations

from .job import JobRuntime, ModelFactory, ModelKey, model_key
from .pages import DEFAULT_MAX_CHARS, Mode, Page, read_page
from .threads import create_lead, job_of

__all__ = [
    "DEFAULT_MAX_CHARS",
    "JobRuntime",
    "Mode",
    "ModelFactory",
    "ModelKey",
    "Page",
    "create_lead",
    "job_of",
    "model_key",
    "read_page",
]
