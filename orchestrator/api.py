"""The Python API — what every front door (the CLI, the MCP server, the web viewer) uses.

async with Orchestrator.open(".threadloom/threads.db") as orch:
    outcome = await orch.run_job("job.toml")
    page = await orch.read(outcome.workers[0].ref, mode="overview")
    again = await orch.resume(outcome.workers[0].ref, "Also cover the empty input case.")
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store import (
    Kind,
    NewMessage,
    SearchHit,
    Status,
    Store,
    ThreadInfo,
    Usage,
    format_ref,
    new_id,
)
from workers import (
    LoopConfig,
    LoopEvent,
    Model,
    ModelError,
    RunOutcome,
    make_model,
    parse_model_spec,
)

from .isolation import record_job_base, start_job
from .jobs import JobSpec, load_job
from .runtime import (
    DEFAULT_MAX_CHARS,
    JobRuntime,
    Mode,
    ModelFactory,
    ModelKey,
    Page,
    create_lead,
    job_of,
    model_key,
    read_page,
)


@dataclass(frozen=True, slots=True)
class WorkerSummary:
    ref: str
    task: str | None
    status: str
    summary: str

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "task": self.task, "status": self.status, "summary": self.summary}


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


class Orchestrator:
    """Runs jobs and threads over one store. ``on_event`` receives every thread's progress;
    ``env`` is extra environment for the workers' ``bash`` (secret-named variables are never
    passed on). ``model_factory`` turns a model spec (and the job's ``max_tokens``/``timeout``
    keywords, when it sets them) into a ``Model`` (default ``workers.make_model``): the seam for
    a caller that builds its providers itself — other credentials, a proxy, test servers."""

    def __init__(
        self,
        store: Store,
        *,
        on_event: Callable[[LoopEvent], None] | None = None,
        config: LoopConfig | None = None,
        env: dict[str, str] | None = None,
        owns_store: bool = False,
        model_factory: ModelFactory | None = None,
    ) -> None:
        self.store = store
        self.model_factory = model_factory
        self.on_event = on_event
        self.config = config or LoopConfig()
        self.env = env
        self._owns_store = owns_store

    @classmethod
    async def open(cls, db: str, *, create_dirs: bool = False, **kw: Any) -> Orchestrator:
        store = await Store.open(db, create_dirs=create_dirs)
        return cls(store, owns_store=True, **kw)

    async def close(self) -> None:
        if self._owns_store:
            await self.store.close()

    async def __aenter__(self) -> Orchestrator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ jobs

    async def run_job(self, job: JobSpec | str | os.PathLike[str], **overrides: Any) -> JobOutcome:
        """Run a job (a ``JobSpec`` or a job file) to the end."""
        spec = job if isinstance(job, JobSpec) else load_job(Path(job), **overrides)
        # Everything that can be checked before anything is stored: every model the job names
        # is built now (a scripted file is read and compiled, a provider's key is looked up),
        # so a bad one is exit 2 with nothing stored, never a lead left queued.
        lead_options, worker_options = (spec.model_options(worker=w) for w in (False, True))
        wanted = [(spec.lead_model, lead_options)]
        wanted.append((spec.resolve_spec(spec.worker_model or spec.model), worker_options))
        wanted += [(spec.model_for(t), worker_options) for t in spec.tasks]
        models: dict[ModelKey, Model] = {}
        try:
            for name, options in wanted:
                key = model_key(name, options)
                if key not in models:
                    models[key] = self._make_model(name, **options)
        except BaseException:
            for built in models.values():
                await built.aclose()
            raise
        base = None
        if spec.isolation == "worktree":
            # refused (exit 2) before anything is stored when the repository can't be isolated
            base = await start_job(spec.workspace_path, db=self.store.db.path)
        lead = await create_lead(
            self.store, spec, isolation=base.to_json() if base is not None else None
        )
        if base is not None:
            await record_job_base(base, lead.id)
        rt = self._runtime(spec, lead.id)
        rt.adopt_models(models)
        try:
            outcome = await rt.run(lead)
        finally:
            await rt.aclose()
        return await self._outcome(rt, outcome)

    async def dispatch(self, job_ref: str, tasks: Sequence[dict[str, Any]]) -> list[RunOutcome]:
        """Run more tasks in an existing job (from Python, without the lead's model)."""
        lead = await self._lead_of(await self._thread(job_ref))
        rt = self._runtime(job_of(lead), lead.id)
        try:
            spawned = await rt.spawn_workers(tool_use_id=f"api-{new_id()}", tasks=tasks)
            return [await rt.run_worker(info) for info, _ in spawned]
        finally:
            await rt.aclose()

    # ------------------------------------------------------------------ threads

    async def resume(
        self, ref: str, message: str | None = None, *, model: str | None = None
    ) -> JobOutcome:
        """Continue a thread with its whole history (and ``message``, if given); same ref. A
        lead's ref resumes the whole job: finished workers are reused, interrupted ones resumed."""
        info = await self._thread(ref)
        if model is not None:
            parse_model_spec(model)
            info = await self.store.update_thread(info.id, model=model)
        return await self._run_existing(info, message=message)

    async def fork(
        self,
        ref: str,
        message: str | None = None,
        *,
        model: str | None = None,
        run: bool = True,
    ) -> JobOutcome | ThreadInfo:
        """A new thread sharing ``ref``'s history up to its anchor (default: the end), then
        ``message``; run to the end unless ``run`` is False (then the fork is returned, idle)."""
        resolved = await self.store.resolve(ref)
        if model is not None:
            parse_model_spec(model)
        at = resolved.end if resolved.start is not None else None
        fork = await self.store.fork(
            resolved.thread.id,
            at=at,
            status=Status.IDLE,
            messages=[NewMessage.user(message)] if message else (),
        )
        if model is not None:
            fork = await self.store.update_thread(fork.id, model=model)
        if not run:
            return fork
        return await self._run_existing(fork)

    async def read(
        self,
        ref: str,
        *,
        mode: Mode = "messages",
        pattern: str | None = None,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> Page:
        return await read_page(self.store, ref, mode=mode, pattern=pattern, max_chars=max_chars)

    async def search(
        self, query: str, *, job: str | None = None, limit: int = 20
    ) -> list[SearchHit]:
        job_id = (await self._thread(job)).job_id if job else None
        return await self.store.search(query, job_id=job_id, limit=limit)

    # ------------------------------------------------------------------ internals

    def _make_model(self, spec: str, **options: Any) -> Model:
        parse_model_spec(spec)
        return (self.model_factory or make_model)(spec, **options)

    def _runtime(self, job: JobSpec, lead_id: str) -> JobRuntime:
        return JobRuntime(
            store=self.store,
            job=job,
            lead_id=lead_id,
            on_event=self.on_event,
            config=self.config,
            env=self.env,
            model_factory=self.model_factory or make_model,
        )

    async def _thread(self, ref: str) -> ThreadInfo:
        return (await self.store.resolve(ref)).thread

    async def _lead_of(self, info: ThreadInfo) -> ThreadInfo:
        return info if info.id == info.job_id else await self.store.get_thread(info.job_id)

    async def _job_for(self, info: ThreadInfo) -> JobSpec:
        root = await self._lead_of(info)
        if root.kind == Kind.LEAD and (root.task or {}).get("job"):
            return job_of(root)
        # a thread outside any job (imported, say): run it in the current directory
        return JobSpec(
            name=root.title or root.ref,
            goal="(continue the thread)",
            model=info.model or "anthropic:claude-sonnet-4-5",
            base_dir=str(Path.cwd()),
        )

    async def _run_existing(self, info: ThreadInfo, *, message: str | None = None) -> JobOutcome:
        job = await self._job_for(info)
        rt = self._runtime(job, info.job_id)
        try:
            if info.kind == Kind.LEAD:
                outcome = await rt.run(info, message=message)
            else:
                outcome = await rt.run_worker(info, message=message, refuse_held=True)
        finally:
            await rt.aclose()
        return await self._outcome(rt, outcome)

    async def _outcome(self, rt: JobRuntime, outcome: RunOutcome) -> JobOutcome:
        workers = []
        for wid in rt.spawned:
            w = await self.store.get_thread(wid)
            workers.append(
                WorkerSummary(
                    ref=w.ref,
                    task=(w.task or {}).get("id"),
                    status=str(w.status),
                    summary=w.result.summary if w.result else (w.error or ""),
                )
            )
        report = outcome.final_text
        if not report and outcome.result is not None:
            report = outcome.result.summary
        status, error, exception = outcome.status, outcome.error, outcome.exception
        failed = [w for w in workers if w.status == Status.FAILED]
        if status == Status.DONE and workers and len(failed) == len(workers):
            # the lead wrote its report, but nothing it dispatched succeeded: not a done job
            status = Status.FAILED
            error = f"every worker failed ({len(failed)} of {len(workers)}): {failed[0].summary}"
            # and when each of them lost the model provider, the job did too (SPEC exit 4)
            causes = [rt.ended[w].exception if w in rt.ended else None for w in rt.spawned]
            if all(isinstance(c, ModelError) for c in causes):
                exception = causes[0]
        return JobOutcome(
            job=format_ref(rt.lead_id),
            lead=format_ref(rt.lead_id),
            ref=outcome.ref,
            status=status,
            report=report,
            workers=workers,
            usage=await self.store.usage.of_job(rt.lead_id),
            error=error,
            exception=exception,
        )
