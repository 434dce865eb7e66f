"""What a run may spend: one frozen object the orchestrator builds from the job spec and the loop
checks in one place (pydantic-ai's ``UsageLimits``)."""

from __future__ import annotations

from dataclasses import dataclass


class BudgetExhausted(Exception):
    """A token limit (the thread's or its job's) stopped a run: its outcome's exception."""


@dataclass(frozen=True, slots=True)
class Limits:
    """A run's limits, None: none. ``turns`` (a worker's ``max_turns``); ``tokens``, this run's;
    ``job_tokens`` (``budget_tokens``), every thread of the thread's job counted from its stored
    usage rows; ``time_s`` (``timeout_s``), the deadline the run is under (error: ``timed_out``)."""

    turns: int = 40
    tokens: int | None = None
    job_tokens: int | None = None
    time_s: float | None = 900.0

    def reached(
        self, *, turns: int, tokens: int, job_tokens: int | None
    ) -> tuple[str, BudgetExhausted | None] | None:
        """The limit that stops the next model call, as the run's error and exception, or None."""
        if turns >= self.turns:
            return f"max_turns ({self.turns}) reached without an end", None
        if self.tokens is not None and tokens >= self.tokens:
            said = f"{tokens:,} of {self.tokens:,} tokens for this thread"
        elif self.job_tokens and (job_tokens or 0) >= self.job_tokens:
            said = f"the job has used {job_tokens:,} of its {self.job_tokens:,} tokens"
        else:
            return None
        return f"budget exhausted: {said}", BudgetExhausted(said)

    @property
    def timed_out(self) -> str:
        return f"timed out after {self.time_s:g} s"
