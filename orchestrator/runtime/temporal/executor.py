"""The lead's side of a Temporal job: each worker run becomes a ``ThreadWorkflow`` on the job's
task queue, started with the thread's workflow id (``USE_EXISTING``: a lead resumed after a
crash attaches to the runs its predecessor started instead of starting them twice), waited for,
and read back from the store. Cancelling the wait (Ctrl-C, ``cancel``) cancels the workflow and
waits for the host to end the thread interrupted, every tool call answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING

import structlog
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from store import LeaseHeld

from .workflow import HELD, RunArgs, RunReport, ThreadWorkflow, workflow_id

if TYPE_CHECKING:
    from store import ThreadInfo
    from workers import RunOutcome

    from ...jobs import JobSpec
    from ..job import JobRuntime

log = structlog.get_logger("threadloom.temporal")

ADDRESS_ENV = "THREADLOOM_TEMPORAL_ADDRESS"
DEFAULT_ADDRESS = "localhost:7233"
CANCEL_WAIT_S = 60.0
"""How long a cancelled wait waits for the host to leave the thread ended."""


def temporal_address(configured: str | None) -> str:
    return configured or os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS


async def connect(address: str) -> Client:
    """A client of the cluster at ``address``; one line (exit 2) when it cannot be reached."""
    from ...errors import CliError

    try:
        return await Client.connect(address)
    except Exception as exc:
        raise CliError(f"cannot reach the Temporal cluster at {address}: {exc}") from None


class TemporalExecutor:
    def __init__(self, job: JobSpec) -> None:
        self.job = job
        self.address = temporal_address(job.temporal_address)
        self._client: Client | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> Client:
        async with self._lock:
            if self._client is None:
                self._client = await connect(self.address)
            return self._client

    async def run(
        self,
        rt: JobRuntime,
        info: ThreadInfo,
        *,
        model_spec: str | None = None,
        message: str | None = None,
    ) -> RunOutcome:
        client = await self.client()
        args = RunArgs(
            thread_id=info.id,
            heartbeat_timeout_s=self.job.heartbeat_timeout_s,
            message=message,
            model_spec=model_spec,
        )
        handle = await client.start_workflow(
            ThreadWorkflow.run,
            args,
            id=workflow_id(info.id),
            task_queue=self.job.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
        log.info("temporal.started", thread=info.ref, run_id=handle.result_run_id)
        try:
            report = await handle.result()
        except asyncio.CancelledError:
            # shielded: a second Ctrl-C must not leave the remote run going
            await asyncio.shield(_cancel(handle, info.ref))
            raise
        except WorkflowFailureError as exc:
            cause = exc.cause if exc.cause is not None else exc
            report = RunReport(status="failed", error=f"the remote run failed: {cause}")
        if report.status == HELD:
            raise LeaseHeld(report.error or f"{info.ref} is being run elsewhere", None)
        return await rt.stored_outcome(info, report.error)

    async def aclose(self) -> None:
        self._client = None  # the SDK's client holds no resources that need closing


async def _cancel(handle: WorkflowHandle[ThreadWorkflow, RunReport], ref: str) -> None:
    """Cancel the remote run and wait (bounded) until its host has ended the thread."""
    with contextlib.suppress(Exception):
        await handle.cancel()
        async with asyncio.timeout(CANCEL_WAIT_S):
            with contextlib.suppress(WorkflowFailureError):
                await handle.result()
    log.info("temporal.cancelled", thread=ref)
