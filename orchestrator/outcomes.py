"""How a run ended, as every front door reports it: ``JobOutcome`` (SPEC ``run``, ``resume``,
``fork`` JSON) with its ``WorkerSummary`` rows, and ``AskOutcome`` (SPEC ``ask``). Plain data
the API builds (``orchestrator.api``) and the doors render."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store import Check, Status, Usage

__all__ = ["AskOutcome", "JobOutcome", "WorkerSummary"]


@dataclass(frozen=True, slots=True)
class WorkerSummary:
    ref: str
    task: str | None
    status: str
    summary: str
    check: Check | None = None
    """The worker's result check (SPEC "Checked results"), as stored with its result."""

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "task": self.task,
            "status": self.status,
            "summary": self.summary,
            "check": None if self.check is None else self.check.model_dump(mode="json"),
        }


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """How a run (of a job, or of one resumed/forked thread) ended: SPEC's ``run`` JSON."""

    job: str
    lead: str
    ref: str
    status: Status
    report: str
    workers: list[WorkerSummary]
    usage: Usage
    error: str | None = None
    exception: BaseException | None = field(default=None, compare=False)

    @property
    def provider_failed(self) -> bool:
        from workers import ModelError

        return isinstance(self.exception, ModelError)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "lead": self.lead,
            "ref": self.ref,
            "status": str(self.status),
            "report": self.report,
            "workers": [w.to_json() for w in self.workers],
            "usage": self.usage.model_dump(),
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class AskOutcome:
    """A question asked of a thread (SPEC ``ask``): the reader's answer with its citations
    checked (those that do not resolve are marked ``[not found]`` in the answer and listed in
    ``unresolved``), the reader's ref, how its run ended and what it used."""

    answer: str
    citations: list[str]
    unresolved: list[str]
    reader: str
    job: str
    status: Status
    usage: Usage
    error: str | None = None
    exception: BaseException | None = field(default=None, compare=False)

    @property
    def ref(self) -> str:
        """The thread that ran: the reader."""
        return self.reader

    @property
    def provider_failed(self) -> bool:
        from workers import ModelError

        return isinstance(self.exception, ModelError)

    def to_json(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "citations": self.citations,
            "reader": self.reader,
            "unresolved": self.unresolved,
            "status": str(self.status),
            "job": self.job,
            "usage": self.usage.model_dump(),
            "error": self.error,
        }
