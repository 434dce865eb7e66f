"""Worktree isolation (``isolation = "worktree"``): git behind three calls the runtime makes
around a worker's run — ``Isolation.ensure`` (its worktree exists), ``Isolation.checkpointer``
(a commit after each turn that changed files), ``Isolation.finish`` (its branch and diff stat on
its result) — plus the job's base (``start_job``), diffs, merges and ``gc``.

``git`` runs every git (and kills its process group on cancel), ``worktrees`` the repository and
worktree operations, ``job`` one job's isolation, ``merge`` diffs and merges of worker refs.
This package imports neither the runtime nor any front door.
"""

from __future__ import annotations

from .job import (
    GcReport,
    Isolation,
    WorkerTree,
    gc,
    job_base,
    job_writes,
    record_job_base,
    start_job,
)
from .merge import MergeReport, merge_refs, worker_diff
from .worktrees import JobBase

__all__ = [
    "GcReport",
    "Isolation",
    "JobBase",
    "MergeReport",
    "WorkerTree",
    "gc",
    "job_base",
    "job_writes",
    "merge_refs",
    "record_job_base",
    "start_job",
    "worker_diff",
]
