"""The job runtime: how threads of a job are created and run, shared by the lead's tools, the
Python API and the CLI.

One ``JobRuntime`` per job run: it holds the job spec (rebuilt from the lead thread when a job is
resumed), the semaphore that bounds running workers, the job's token budget check (SQL sums of
stored usage rows, before every model call of every thread), the model clients, and the event
sink for live progress. Every thread — lead, worker, reader, fork — runs through
``workers.run_thread``; this module only decides which tools, model and limits it gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from store import (
    Kind,
    LeaseHeld,
    NewMessage,
    Status,
    Store,
    TextBlock,
    ThreadInfo,
    ToolUseBlock,
    format_ref,
    new_id,
)
from workers import (
    ORCHESTRATOR_TOOL_ID_PREFIX,
    SUBMIT_RESULT,
    BudgetExhausted,
    LoopConfig,
    LoopEvent,
    Model,
    RunOutcome,
    Tool,
    build_tools,
    make_model,
    run_thread,
    worker_system_prompt,
)
from workers.providers import parse_model_spec
from workers.tools import SandboxSettings, require_sandbox

from ._isolation import Isolation, WorkerTree
from ._jobfile import JobSpec, TaskSpec
from ._prompts import lead_system_prompt, reader_system_prompt

log = structlog.get_logger("threadloom.runtime")

LEAD_TOOLS = (
    "dispatch",
    "read_thread",
    "ask_thread",
    "search_threads",
    "resume_thread",
    "fork_thread",
)
MERGE_TOOL = "merge"  # lead tool of worktree jobs only
READER_TOOLS = ("read_thread",)


ModelFactory = Callable[..., Model]
"""``factory(spec, **options)`` → a ``Model`` (``workers.make_model`` unless a caller brings its
own). ``options`` are the provider constructor's keywords the job sets — ``max_tokens`` and
``timeout`` (``JobSpec.model_options``) — and only those: a job that sets neither calls
``factory(spec)``, so a one-argument factory keeps working."""

ModelKey = tuple[str, tuple[tuple[str, Any], ...]]
"""One built model per spec *and* options: the lead and the workers may share a spec but not
their knobs."""


def model_key(spec: str, options: dict[str, Any]) -> ModelKey:
    return spec, tuple(sorted(options.items()))


def task_message(task_id: str, title: str, prompt: str) -> str:
    """A worker's first message (the scripted demo matches on its first line)."""
    return f"Task {task_id}: {title}\n\n{prompt}"


def lead_message(job: JobSpec) -> str:
    lines = [f"Job: {job.name}", f"Goal: {job.goal}", f"Workspace: {job.workspace_path}"]
    if job.isolation == "worktree":
        lines.append(
            "Isolation: each worker works in its own git worktree and branch; its result names"
            " the branch and diff stat. Use merge to combine branches into the job branch."
        )
    if job.tasks:
        lines.append(
            f"The job file defines {len(job.tasks)} tasks; they are being dispatched now."
            " Review the results, read transcripts where you need to, then write the report."
        )
    else:
        lines.append(
            "Plan the work, dispatch it to workers (independent tasks in parallel), review the"
            " results, then write the report."
        )
    return "\n".join(lines)


@dataclass
class JobRuntime:
    """Everything a running job shares. ``spawned`` collects the worker threads this run created
    (the CLI's ``workers`` list); ``ended`` holds how each worker run by this runtime ended, the
    exception that ended it included (so a job whose workers all lost the provider says so)."""

    store: Store
    job: JobSpec
    lead_id: str
    on_event: Callable[[LoopEvent], None] | None = None
    config: LoopConfig = field(default_factory=LoopConfig)
    env: dict[str, str] | None = None
    spawned: list[str] = field(default_factory=list)
    ended: dict[str, RunOutcome] = field(default_factory=dict)
    model_factory: ModelFactory = make_model
    """Builds a ``Model`` from a spec and options, once per both and job run."""
    _models: dict[ModelKey, Model] = field(default_factory=dict)
    _sem: asyncio.Semaphore | None = None
    _sandbox: SandboxSettings | None = None
    _isolation: Isolation | None = None
    _isolation_loaded: bool = False

    @property
    def semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.job.max_parallel)
        return self._sem

    def model(self, spec: str, *, worker: bool = False) -> Model:
        """The model for ``spec`` with the lead's knobs, or (``worker``) the workers' — which
        readers get too: they run on the workers' model."""
        options = self.job.model_options(worker=worker)
        key = model_key(spec, options)
        if key not in self._models:
            self._models[key] = self.model_factory(spec, **options)
        return self._models[key]

    def adopt_models(self, models: dict[ModelKey, Model]) -> None:
        """Models built (and so validated) before the job was stored: used, and closed, here."""
        self._models.update(models)

    async def aclose(self) -> None:
        for m in self._models.values():
            with contextlib.suppress(Exception):
                await m.aclose()
        self._models.clear()

    async def isolation(self) -> Isolation | None:
        """The job's worktree isolation (from its lead thread), or None."""
        if not self._isolation_loaded:
            lead = await self.store.get_thread(self.lead_id)
            self._isolation = await Isolation.of_job(self.store, lead, db=self.store.db.path)
            self._isolation_loaded = True
        return self._isolation

    # ------------------------------------------------------------------ budget and refs

    async def check_budget(self) -> None:
        if not self.job.budget_tokens:
            return
        used = (await self.store.job_usage(self.lead_id)).total_tokens
        if used >= self.job.budget_tokens:
            raise BudgetExhausted(
                f"the job has used {used:,} of its {self.job.budget_tokens:,} tokens"
            )

    async def task_ref(self, task_id: str) -> str | None:
        """The ref of the newest worker that ran task ``task_id`` in this job."""
        found = None
        for d in await self.store.dispatches_of(self.lead_id):
            if d.task_key == task_id:
                found = d.worker_id
        return format_ref(found) if found else None

    # ------------------------------------------------------------------ running threads

    def sandbox(self) -> SandboxSettings:
        """The workers' bash sandbox, decided once per job run: ``required`` without a working
        bubblewrap raises ``SandboxUnavailable`` (exit 2) before anything runs; ``auto`` without
        it falls back to the plain runner and says so once (a warning, in the job log too)."""
        if self._sandbox is None:
            mode = self.job.worker_sandbox
            if mode == "none":
                # The file tools refuse the hidden paths whatever runs bash: always pass them.
                self._sandbox = SandboxSettings(mode="none", hidden=tuple(self._hidden_paths()))
                return self._sandbox
            status = require_sandbox(mode)
            job = format_ref(self.lead_id)
            if status.available:
                log.info("sandbox.enabled", job=job, network=self.job.network)
            else:
                log.warning(
                    "sandbox.unavailable",
                    job=job,
                    reason=status.reason,
                    fallback="bash runs without the sandbox (process-group runner)",
                    hint='apt-get install bubblewrap, or set sandbox = "none" to silence this',
                )
            self._sandbox = SandboxSettings(
                mode=mode, network=self.job.network, hidden=tuple(self._hidden_paths())
            )
        return self._sandbox

    def _hidden_paths(self) -> list[Path]:
        """What no tool may reach (the file tools refuse it, the sandbox hides it): the
        workspace's ``.threadloom`` directory always, and the database (with its ``-wal``,
        ``-shm``, ``-journal``) and the job logs wherever they are: their directory, or the
        files themselves when that directory holds the workspace."""
        workspace = self.job.workspace_path
        hidden = [workspace / ".threadloom"]
        db = self.store.db.path
        if db is None:
            return hidden
        folder = db.parent.resolve()
        if workspace == folder or workspace.is_relative_to(folder):
            names = [db.name, f"{db.name}-wal", f"{db.name}-shm", f"{db.name}-journal", "logs"]
            hidden += [folder / n for n in names]
        else:
            hidden.append(folder)
        return hidden

    async def run(
        self, info: ThreadInfo, *, model_spec: str | None = None, message: str | None = None
    ) -> RunOutcome:
        """Run (or continue) any thread of this job with the tools, model and limits its kind
        and stored task call for."""
        sandbox = self.sandbox()
        spec = model_spec or info.model or self.job.lead_model
        tree: WorkerTree | None = None
        after_tools = None
        iso = await self.isolation() if WorkerTree.of(info) is not None else None
        if iso is not None:
            info, tree = await iso.ensure(info)
            if tree is not None:
                after_tools = await iso.checkpointer(info, tree)
        task = info.task or {}
        if info.kind == Kind.LEAD:
            from ._lead_tools import lead_tools

            tools: Sequence[Tool[Any]] = lead_tools(self)
            cfg = self.config
        elif info.kind == Kind.READER:
            from ._lead_tools import reader_tools

            tools = reader_tools(self, target=str(task.get("reader_of", "")))
            cfg = LoopConfig(max_turns=20, timeout_s=self.config.timeout_s)
        else:
            tools = build_tools([t for t in info.tools if t != SUBMIT_RESULT])
            cfg = LoopConfig(
                max_turns=int(task.get("max_turns", self.job.worker.max_turns)),
                timeout_s=float(task.get("timeout_s", self.job.worker.timeout_s)),
                output_cap=self.config.output_cap,
                bash_timeout_s=self.config.bash_timeout_s,
            )
        workspace = Path(task.get("workspace") or self.job.workspace_path)
        outcome = await run_thread(
            self.store,
            info.id,
            model=self.model(spec, worker=info.kind != Kind.LEAD),
            tools=tools,
            workspace=workspace,
            config=cfg,
            before_model_call=self.check_budget,
            on_event=self.on_event,
            resolve_task_ref=self.task_ref,
            message=message,
            env=self.env,
            sandbox=sandbox if info.kind == Kind.WORKER else None,
            after_tools=after_tools,
        )
        if iso is not None and tree is not None:
            result = await iso.finish(info, tree, outcome.result)
            outcome = dataclasses.replace(outcome, result=result)
        return outcome

    async def run_worker(
        self,
        info: ThreadInfo,
        *,
        model_spec: str | None = None,
        message: str | None = None,
        refuse_held: bool = False,
    ) -> RunOutcome:
        """A worker (or fork, or resumed worker) under the job's ``max_parallel``. Its failure
        becomes its terminal status; it never raises into its siblings — only cancellation
        propagates. ``refuse_held``: a thread another runner holds raises ``LeaseHeld`` (exit
        2, nothing appended) instead of being reported as this run's outcome."""
        async with self.semaphore:
            try:
                outcome = await self.run(info, model_spec=model_spec, message=message)
            except asyncio.CancelledError:
                raise
            except LeaseHeld:
                if refuse_held:
                    raise  # a resume of a thread that runs elsewhere: refused, nothing appended
                log.warning("worker.held_elsewhere", thread=info.ref)
                # the other runner owns the thread and its dispatch row now: report, don't touch
                return await self._as_stored(info, f"{info.ref} is being run by another runner")
            except Exception as exc:
                log.warning("worker.crashed", thread=info.ref, error=str(exc))
                outcome = await self._as_stored(info, str(exc), exc)
            await self.store.set_dispatch_status(info.id, str(outcome.status))
            self.ended[info.id] = outcome
            return outcome

    async def _as_stored(
        self, info: ThreadInfo, error: str, exception: BaseException | None = None
    ) -> RunOutcome:
        """The outcome of a run that raised instead of ending: whatever the store now says."""
        latest = await self.store.get_thread(info.id)
        return RunOutcome(
            thread_id=info.id,
            status=latest.status,
            result=latest.result,
            final_text="",
            turns=0,
            usage=await self.store.thread_usage(info.id),
            error=error,
            exception=exception,
        )

    # ------------------------------------------------------------------ creating threads

    async def spawn_workers(
        self, *, tool_use_id: str, tasks: Sequence[dict[str, Any]]
    ) -> list[tuple[ThreadInfo, bool]]:
        """One worker thread per task (idempotent per lead tool_use id and task index)."""
        out = []
        iso = await self.isolation()
        for i, raw in enumerate(tasks):
            task_id = str(raw.get("id") or f"task-{i + 1}")
            tools = list(raw.get("tools") or self.job.worker.tools)
            spec = self.job.resolve_spec(
                str(raw.get("model") or self.job.worker_model or self.job.model)
            )
            parse_model_spec(spec)
            tid = new_id()
            ref = format_ref(tid)
            workspace = self.job.workspace_path
            placement: dict[str, Any] = {"workspace": str(workspace)}
            if iso is not None:
                tree = await iso.for_new_worker(tid, task_id)
                workspace = tree.workspace
                placement = tree.task_fields()
            info, created = await self.store.spawn(
                lead_id=self.lead_id,
                tool_use_id=tool_use_id,
                task_index=i,
                task_key=task_id,
                thread_id=tid,
                kind=Kind.WORKER,
                title=str(raw.get("title") or task_id),
                task={
                    "id": task_id,
                    "title": str(raw.get("title") or task_id),
                    "prompt": str(raw.get("prompt") or ""),
                    **placement,
                    "max_turns": self.job.worker.max_turns,
                    "timeout_s": self.job.worker.timeout_s,
                },
                system_prompt=worker_system_prompt(
                    thread_ref=ref,
                    workspace=workspace,
                    tools=tools,
                    notes_from=self.job.workspace_path,
                ),
                tools=[*tools, SUBMIT_RESULT],
                model=spec,
                messages=[
                    NewMessage.user(
                        task_message(task_id, str(raw.get("title") or task_id), str(raw["prompt"]))
                    )
                ],
            )
            if created:
                self.spawned.append(info.id)
            out.append((info, created))
        return out

    async def create_reader(self, target: ThreadInfo, question: str) -> ThreadInfo:
        spec = self.job.resolve_spec(self.job.worker_model or self.job.model)
        return await self.store.create_thread(
            kind=Kind.READER,
            title=f"reads {target.ref}: {question[:60]}",
            parent_id=self.lead_id,
            task={"reader_of": target.id, "question": question},
            system_prompt=reader_system_prompt(target.ref),
            tools=list(READER_TOOLS),
            model=spec,
            status=Status.QUEUED,
            messages=[NewMessage.user(f"Thread to read: {target.ref}\nQuestion: {question}")],
        )


async def create_lead(
    store: Store, job: JobSpec, *, isolation: dict[str, Any] | None = None
) -> ThreadInfo:
    """The lead thread of a new job. With ``[[task]]`` entries the lead's first turn — the
    ``dispatch`` of exactly those tasks — is written here; running the lead then carries it out
    (dispatch is replay-safe, so a crash during it is resumed, not repeated). ``isolation`` is
    the worktree job's base (``_worktrees.JobBase.to_json()``); with it the lead gets ``merge``."""
    messages = [NewMessage.user(lead_message(job))]
    if job.tasks:
        messages.append(first_dispatch(job.tasks))
    task: dict[str, Any] = {"job": job.model_dump(mode="json")}
    if isolation is not None:
        task["isolation"] = isolation
    return await store.create_thread(
        kind=Kind.LEAD,
        title=job.name,
        task=task,
        system_prompt=lead_system_prompt(),
        tools=[*LEAD_TOOLS, *((MERGE_TOOL,) if isolation is not None else ())],
        model=job.lead_model,
        status=Status.QUEUED,
        messages=messages,
    )


def first_dispatch(tasks: Sequence[TaskSpec]) -> NewMessage:
    payload = [
        {
            k: v
            for k, v in {
                "id": t.id,
                "title": t.title,
                "prompt": t.prompt,
                "tools": t.tools,
                "model": t.model,
            }.items()
            if v is not None
        }
        for t in tasks
    ]
    return NewMessage(
        role="assistant",
        content=[
            TextBlock(text=f"Dispatching the job's {len(tasks)} tasks."),
            ToolUseBlock(
                id=f"{ORCHESTRATOR_TOOL_ID_PREFIX}{new_id()}",
                name="dispatch",
                input={"tasks": payload},
            ),
        ],
    )


def job_of(lead: ThreadInfo) -> JobSpec:
    """The job spec a lead thread was started with (stored on it)."""
    data = (lead.task or {}).get("job")
    if not isinstance(data, dict):
        raise ValueError(f"{lead.ref} carries no job spec")
    return JobSpec.model_validate(data)
