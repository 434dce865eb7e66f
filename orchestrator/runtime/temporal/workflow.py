"""The workflow of one worker run: a single ``run_thread`` activity, heartbeating while it runs.

A host that dies stops heartbeating; after ``heartbeat_timeout_s`` Temporal hands the activity
to another host, which takes over the thread's expired lease and resumes it as after any crash
(orphaned tool calls answered "interrupted; effect unknown", nothing re-run). The activity is
retried until it reports; a run's own failure is a report (the thread's stored status), never
a retry. Cancelling the workflow cancels the activity and waits for it to leave the thread
ended with every tool call answered.

Nothing here touches the outside world, so the workflow runs outside the SDK's sandbox (it
would otherwise re-import this package and its parents, the store included).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

ACTIVITY = "run_thread"
WORKFLOW = "threadloom.thread"
HELD = "held"
"""A report's status when the first attempt found another runner holding the thread."""


def workflow_id(thread_id: str, run_no: int) -> str:
    """One workflow id per thread and run, used once (the executor starts runs with
    ``REJECT_DUPLICATE``): starting run ``n`` again attaches to it or finds it ended, never
    runs it twice."""
    return f"threadloom-{thread_id}-{run_no}"


@dataclass(frozen=True)
class RunArgs:
    thread_id: str
    run_no: int = 1
    heartbeat_timeout_s: float = 30.0
    message: str | None = None
    model_spec: str | None = None


@dataclass(frozen=True)
class RunReport:
    """How the run ended: the thread's status as stored (or ``HELD``) and its error."""

    status: str
    error: str | None = None


@workflow.defn(name=WORKFLOW)
class ThreadWorkflow:
    @workflow.run
    async def run(self, args: RunArgs) -> RunReport:
        report: RunReport = await workflow.execute_activity(
            ACTIVITY,
            args,
            result_type=RunReport,
            start_to_close_timeout=timedelta(days=7),
            heartbeat_timeout=timedelta(seconds=args.heartbeat_timeout_s),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200),
                backoff_coefficient=2.0,
                maximum_interval=timedelta(seconds=5),
                maximum_attempts=0,
            ),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        return report
