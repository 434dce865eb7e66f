"""``threadloom worker``'s side: a Temporal worker on one host that executes worker runs.

The ``run_thread`` activity takes the thread's lease and runs it through the job's own
``JobRuntime.run`` (the job spec is read from the lead thread in the shared store), heartbeating
every third of the heartbeat timeout. A retried attempt — the host that ran it died — resumes
the thread like any crashed one: the dead host's lease is taken over (at once when its process
is known dead, else once it expires; until then the attempt is retried), orphaned tool calls are
answered "interrupted", nothing is re-run. A late host cannot append (the store's lease guard).

A worktree job with ``[job] remote`` makes its workers' worktrees from this host's mirror of
the remote (``isolation.remote``: under env ``THREADLOOM_MIRRORS``, else ``.threadloom/mirrors``
in the host's working directory) and pushes their branches and checkpoints back there.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import structlog
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from store import LeaseHeld, LeaseLost, Status, Store, TextBlock
from workers import LoopConfig

from ...isolation.remote import mirrors_home
from ..job import JobRuntime, ModelFactory
from ..threads import job_of
from .executor import connect
from .workflow import ACTIVITY, HELD, RunArgs, RunReport, ThreadWorkflow

if TYPE_CHECKING:
    from store import ThreadInfo

log = structlog.get_logger("threadloom.temporal")

ENDED = (Status.DONE, Status.FAILED, Status.CANCELLED)
UNENDED_ATTEMPTS = 5
"""Attempts that may stop with an error and the thread not ended before one is reported as
the run's outcome (``interrupted``, with that error) instead of retried."""


class Host:
    """The activities of one host over its store: one ``JobRuntime`` per job it has run for
    (models and the sandbox decision are built once per job, as in a local run)."""

    def __init__(self, store: Store, *, model_factory: ModelFactory | None = None) -> None:
        self.store = store
        self.model_factory = model_factory
        self._runtimes: dict[str, JobRuntime] = {}

    async def runtime(self, info: ThreadInfo) -> JobRuntime:
        if info.job_id not in self._runtimes:
            lead = await self.store.get_thread(info.job_id)
            job = job_of(lead)
            # the lease lives no longer than a heartbeat: when Temporal hands a silent host's
            # run to another host, its lease has expired too, so the takeover is immediate
            config = LoopConfig(lease_ttl_s=job.heartbeat_timeout_s)
            rt = JobRuntime(store=self.store, job=job, lead_id=lead.id, config=config)
            if self.model_factory is not None:
                rt.model_factory = self.model_factory
            self._runtimes[info.job_id] = rt
        return self._runtimes[info.job_id]

    async def aclose(self) -> None:
        for rt in self._runtimes.values():
            await rt.aclose()
        self._runtimes.clear()

    @activity.defn(name=ACTIVITY)
    async def run_thread(self, args: RunArgs) -> RunReport:
        attempt = activity.info().attempt
        beat = asyncio.create_task(_heartbeat(args.heartbeat_timeout_s / 3))
        try:
            info = await self.store.get_thread(args.thread_id)
            message = args.message
            if info.status in ENDED and (message is None or attempt > 1):
                # ended before its host could report it — or this attempt is a stale one: a
                # task a host received before it froze, started once it woke, after another
                # attempt had finished the thread. A run without a message has nothing to do
                # on an ended thread; taking its lease would move it back to running (and,
                # stopped, leave it interrupted) under the finished run. (The lease's take
                # refuses it too, in its own transaction, when the end lands after this read:
                # the run then reports the thread as it ended)
                return RunReport(str(info.status), info.error)
            if attempt > 1 and message is not None and await self._delivered(info.id, message):
                message = None
            log.info("temporal.run", thread=info.ref, attempt=attempt)
            rt = await self.runtime(info)
            try:
                outcome = await rt.run(info, model_spec=args.model_spec, message=message)
            except LeaseHeld as held:
                if attempt == 1 and held.owner is not None and not isinstance(held, LeaseLost):
                    # another runner owns it: reported, as a local run would
                    return RunReport(HELD, str(held))
                # the dead host's lease has not expired yet, its row is still locked, or this
                # attempt lost its lease midway (expired under load, or Temporal moved the run):
                # try again shortly — the next attempt resumes the thread as after a crash
                raise ApplicationError(str(held), type=type(held).__name__) from None
            except asyncio.CancelledError:
                raise  # the loop left the thread interrupted, every tool call answered
            except Exception as exc:
                log.warning("worker.crashed", thread=info.ref, error=str(exc), attempt=attempt)
                latest = await self.store.get_thread(info.id)
                if latest.status not in ENDED and (
                    attempt < UNENDED_ATTEMPTS or activity.is_worker_shutdown()
                ):
                    # the run stopped without its end (the thread is left interrupted: the
                    # host's database connection was cut, the host is stopping): not a report
                    # — the lead would take a thread nobody runs for finished. The next
                    # attempt resumes it, here or on another host
                    raise ApplicationError(
                        f"{info.ref}: the run stopped before its end: {exc}",
                        type=type(exc).__name__,
                    ) from None
                return RunReport(str(latest.status), str(exc))
            return RunReport(str(outcome.status), outcome.error)
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _delivered(self, thread_id: str, message: str) -> bool:
        """Whether the dead attempt already appended the run's message."""
        for m in reversed(await self.store.messages(thread_id)):
            if m.role == "user" and any(
                isinstance(b, TextBlock) and b.text == message for b in m.content
            ):
                return True
        return False


async def _heartbeat(every_s: float) -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(every_s)


async def serve(
    store: Store,
    *,
    address: str,
    task_queue: str,
    slots: int,
    ready: asyncio.Event | None = None,
    model_factory: ModelFactory | None = None,
) -> None:
    """Run this host's Temporal worker until cancelled (its runs end interrupted then)."""
    client = await connect(address)
    host = Host(store, model_factory=model_factory)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[ThreadWorkflow],
        activities=[host.run_thread],
        max_concurrent_activities=slots,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    try:
        async with worker:
            log.info(
                "temporal.worker_ready",
                address=address,
                task_queue=task_queue,
                slots=slots,
                mirrors=str(mirrors_home()),  # where remote jobs' worktrees are made (remote)
            )
            if ready is not None:
                ready.set()
            await asyncio.Event().wait()
    finally:
        await host.aclose()
