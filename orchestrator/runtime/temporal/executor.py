"""The lead's side of a Temporal job: each worker run becomes a ``ThreadWorkflow`` on the job's
task queue with the id of its thread and run (``workflow_id(thread, run_no)``), waited for, and
read back from the store.

Runs are numbered 1, 2, 3 … per thread, and Temporal keeps the record of which exist: starting a
run tries ids from run 1 up (``REJECT_DUPLICATE``: an id is used once) and stops at the first
that is free (a new run) or still open. An open run is the thread's current one: a lead resumed
after a crash attaches to it (a replayed ``dispatch``) instead of starting it twice; a run that
carries a message — a resume — is refused while another is open (``LeaseHeld``, owner ``None``:
exit 2 from the command line, nothing appended; SPEC: one runner at a time per thread), since an
attached run would never see the message. Cancelling the wait (Ctrl-C, ``cancel``) cancels the
workflow and waits for the host to end the thread interrupted, every tool call answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING

import structlog
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

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
    from ...errors import UsageError

    try:
        return await Client.connect(address)
    except Exception as exc:
        raise UsageError(f"cannot reach the Temporal cluster at {address}: {exc}") from None


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
        handle = await self._start(client, info, model_spec=model_spec, message=message)
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

    async def _start(
        self,
        client: Client,
        info: ThreadInfo,
        *,
        model_spec: str | None,
        message: str | None,
    ) -> WorkflowHandle[ThreadWorkflow, RunReport]:
        """The thread's open run (attached), or its next run (started); see the module."""
        run_no = 1
        while True:
            wid = workflow_id(info.id, run_no)
            args = RunArgs(
                thread_id=info.id,
                run_no=run_no,
                heartbeat_timeout_s=self.job.heartbeat_timeout_s,
                message=message,
                model_spec=model_spec,
            )
            try:
                handle = await client.start_workflow(
                    ThreadWorkflow.run,
                    args,
                    id=wid,
                    task_queue=self.job.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                )
            except WorkflowAlreadyStartedError:
                existing: WorkflowHandle[ThreadWorkflow, RunReport] = client.get_workflow_handle(
                    wid, result_type=RunReport
                )
                if (await existing.describe()).status != WorkflowExecutionStatus.RUNNING:
                    run_no += 1  # that run has ended: the next one may be this
                    continue
                if message is not None:
                    raise LeaseHeld(
                        f"{info.ref} is running on a worker host (run {run_no}, Temporal"
                        f" workflow {wid}); wait for it to end or cancel it — the message"
                        " was not appended",
                        None,
                    ) from None
                log.info("temporal.reattached", thread=info.ref, run=run_no, workflow=wid)
                return existing
            log.info("temporal.started", thread=info.ref, run=run_no, workflow=wid)
            return handle

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
