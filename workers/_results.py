"""``submit_result``: how a worker ends with its distilled result (SPEC §Distilled result).

The model-facing schema is exactly the SPEC's fields; the orchestrator's additions (ref, task,
turns, usage, duration, branch…) are filled in by the loop. Evidence refs must point into the
worker's own thread; those that do not resolve are dropped and counted, never passed on.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import store
from store import Check, Result, ThreadRef, format_ref
from store.errors import RefSyntaxError

from ._protocol import ToolSpec

SUBMIT_RESULT = "submit_result"


class _Edge(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# The model-facing shapes of the result's parts: the store's own (``store.Finding``…) with the
# schema a model is shown. Validated here, at the edge; the store's classes are built from them.


class Finding(_Edge):
    claim: str = Field(min_length=1)
    evidence: list[str] = Field(default_factory=list)


class Change(_Edge):
    path: str = Field(min_length=1)
    action: Literal["added", "modified", "deleted"]


class Verification(_Edge):
    command: str = Field(min_length=1)
    outcome: str


class Submission(BaseModel):
    """The distilled result of a worker's task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["done", "partial", "failed", "blocked"] = Field(
        description="done: the task is complete; partial: some of it; failed: could not do it;"
        " blocked: cannot proceed without something outside your reach (say what)"
    )
    summary: str = Field(
        max_length=2000, description="What you found and did, for the lead: at most 2,000 chars"
    )
    findings: list[Finding] = Field(
        default_factory=list,
        description="Claims, each with evidence: refs into your own thread (T-…#n) where the"
        " proof is (a test run, a file read, a grep)",
    )
    changes: list[Change] = Field(
        default_factory=list, description="Files you added, modified or deleted"
    )
    verification: list[Verification] = Field(
        default_factory=list, description="Commands you ran to verify, with their outcome"
    )
    negative_results: list[str] = Field(
        default_factory=list, description="What you tried that did not work, and why"
    )
    open_questions: list[str] = Field(default_factory=list)


@functools.cache
def submit_result_spec() -> ToolSpec:
    """The tool's spec, made once (pydantic generates the schema anew on every call)."""
    schema = Submission.model_json_schema()
    return ToolSpec(
        name=SUBMIT_RESULT,
        description=(
            "End your task with your distilled result. Call it once, last, after verifying."
            " Evidence refs point into your own thread: T-<your thread id>#<message number>."
        ),
        input_schema=schema,
    )


def validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:8]:
        loc = ".".join(str(x) for x in e["loc"]) or "(input)"
        parts.append(f"{loc}: {e['msg']}")
    more = f" (+{err.error_count() - 8} more)" if err.error_count() > 8 else ""
    return "invalid submit_result input — " + "; ".join(parts) + more + ". Fix it and call again."


def check_evidence(
    submission: Submission, *, ancestry: Sequence[tuple[str, int]]
) -> tuple[list[store.Finding], int]:
    """Keep only evidence refs naming messages of this thread, normalised to ``T-<self>#n``;
    count the dropped ones. ``ancestry`` is ``Store.ancestry(self)``: a fork may cite an
    inherited message by its parent's ref, since both name the same message."""
    self_id, head = ancestry[0]
    dropped = 0
    kept: list[store.Finding] = []
    for f in submission.findings:
        refs = []
        for raw in f.evidence:
            try:
                ref = ThreadRef.parse(raw)
            except RefSyntaxError:
                dropped += 1
                continue
            last = ref.start if ref.end is None or ref.open_end else ref.end
            ok = ref.start is not None and any(
                ref.matches(owner) and last is not None and last <= bound
                for owner, bound in ancestry
            )
            if not ok or ref.start is None:
                dropped += 1
                continue
            end = min(ref.end, head) if ref.end is not None and not ref.open_end else None
            refs.append(format_ref(self_id, ref.start, end))
        kept.append(store.Finding(claim=f.claim, evidence=refs))
    return kept, dropped


def correction_message(check: Check) -> str:
    """The one correction round's tool error (SPEC "Checked results"): each contradicted claim
    with its reason and the refs that show the contrary."""
    lines = [
        "submit_result: not recorded. Checked against this thread, these claims are"
        " contradicted by it:"
    ]
    for c in check.claims:
        if c.verdict == "contradicted":
            where = c.kind if c.index is None else f"{c.kind} {c.index}"
            lines.append(f"- {where}: {c.reason} ({', '.join(c.refs)})")
    lines.append(
        "Correct the result (or the work, then the result) and call submit_result again. This"
        " is the only correction round: what you submit next is checked again and stands."
    )
    return "\n".join(lines)


def to_result(
    submission: Submission, findings: Sequence[store.Finding | Finding], dropped: int, **extra: Any
) -> Result:
    return Result(
        status=submission.status,
        summary=submission.summary,
        findings=list(findings),
        changes=list(submission.changes),
        verification=list(submission.verification),
        negative_results=list(submission.negative_results),
        open_questions=list(submission.open_questions),
        dropped_evidence=dropped,
        **extra,
    )


__all__ = [
    "SUBMIT_RESULT",
    "Change",
    "Submission",
    "Verification",
    "check_evidence",
    "correction_message",
    "submit_result_spec",
    "to_result",
    "validation_message",
]
