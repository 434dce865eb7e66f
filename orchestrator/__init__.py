"""The orchestrator: the lead, dispatch, jobs, budgets, the CLI and the Python API."""

from ._api import JobOutcome, Orchestrator, WorkerSummary
from ._jobfile import JobFileError, JobSpec, TaskSpec, WorkerDefaults, load_job, parse_job
from ._reading import Page, ReadError, read_page
from ._runtime import JobRuntime

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
