"""Where a job's worker runs execute — the seam between ``JobRuntime.run_worker`` (which bounds
them by ``max_parallel`` and turns their failures into outcomes) and the machine that runs them.

- ``local`` (the default): in this process, ``JobRuntime.run`` under the job's semaphore.
- ``temporal``: each run is a Temporal workflow executed by a ``threadloom worker`` host
  (``runtime.temporal``); the ``temporalio`` SDK is imported on that path only, so a local job
  never loads it and needs no extra installed.

Both give back a ``RunOutcome`` read from the store, which is the source of truth on every path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..errors import UsageError

if TYPE_CHECKING:
    from store import Store, ThreadInfo
    from workers import RunOutcome

    from ..jobs import JobSpec
    from .job import JobRuntime

TEMPORAL_EXTRA = "pip install 'threadloom[temporal]'"


class Executor(Protocol):
    """Runs one worker run of a job to its end (raising only ``CancelledError``, ``LeaseHeld``
    or what ``run_worker`` turns into the thread's stored outcome)."""

    async def run(
        self,
        rt: JobRuntime,
        info: ThreadInfo,
        *,
        model_spec: str | None = None,
        message: str | None = None,
    ) -> RunOutcome: ...

    async def aclose(self) -> None: ...


class LocalExecutor:
    """The run in this process: the job's own ``JobRuntime.run``."""

    async def run(
        self,
        rt: JobRuntime,
        info: ThreadInfo,
        *,
        model_spec: str | None = None,
        message: str | None = None,
    ) -> RunOutcome:
        return await rt.run(info, model_spec=model_spec, message=message)

    async def aclose(self) -> None:
        return None


def require_temporal(what: str) -> None:
    """The ``temporalio`` SDK, or one line (exit 2) naming the extra that brings it."""
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise UsageError(f"{what} needs the Temporal SDK: {TEMPORAL_EXTRA}") from None


def require_shared_store(store: Store, what: str) -> None:
    """Worker runs on other hosts share the database: it must be PostgreSQL (exit 2 naming it
    otherwise — a SQLite file is one machine's)."""
    if store.db.dialect != "postgresql":
        raise UsageError(
            f"{what} needs a PostgreSQL --db that every host shares"
            f" (got {store.db.display}); e.g. --db postgresql://user@host/threadloom"
        )


def check_executor(job: JobSpec, store: Store) -> None:
    """Refuse (exit 2, before anything is stored) a job whose executor cannot run here."""
    if job.executor == "temporal":
        require_shared_store(store, 'executor = "temporal"')
        require_temporal('executor = "temporal"')


def executor_for(job: JobSpec) -> Executor:
    if job.executor == "temporal":
        require_temporal('executor = "temporal"')
        from .temporal.executor import TemporalExecutor

        return TemporalExecutor(job)
    return LocalExecutor()
