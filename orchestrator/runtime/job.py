"""The job runtime: how the threads of a job are run, shared by the lead's tools, the Python API
and every front door (creating them is ``threads``).

One ``JobRuntime`` per job run: it holds the job spec (rebuilt from the lead thread when a job is
resumed), the semaphore that bounds running workers, the model clients, and the event sink for
live progress. Every thread — lead, worker, reader, fork — runs through ``workers.run_thread``;
this module only decides which tools, model and limits (``workers.Limits``: the job's token
budget among them, which the loop checks against the job's stored usage) it gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from store import (
    Check,
    Kind,
    Lease,
    LeaseHeld,
    Message,
    NewMessage,
    Result,
    Status,
    Store,
    ThreadInfo,
    format_ref,
    new_id,
)
from workers import (
    BYTES_PER_TOKEN,
    SUBMIT_RESULT,
    CheckHook,
    HandOff,
    HandOffRefused,
    Limits,
    LoopConfig,
    LoopEvent,
    Model,
    RunOutcome,
    Tool,
    build_tools,
    make_model,
    run_thread,
)
from workers.tools import (
    ProcessLimitUnavailable,
    SandboxSettings,
    process_limit,
    require_sandbox,
)

from ..errors import LedgerTooLarge, UsageError, WorktreeError
from ..isolation import Isolation, WorkerTree
from ..isolation.worktrees import DB_FILES
from ..jobs import JobSpec, TaskInput, check_tasks
from ..outcomes import AskOutcome
from . import threads
from .check import check_result
from .executors import Executor, executor_for
from .lead_tools import ReadThreadTool, check_citations, lead_tools, reader_tools
from .ledger import handoff_ledger

log = structlog.get_logger("threadloom.runtime")


def _say_process_limit(job: str) -> None:
    """Once per job, how its bash commands are kept to ``PIDS_MAX`` processes: a warning when it
    is the supervisor (looser than the kernel's refusal) or when there is none (then no command
    runs), the job log's record otherwise."""
    try:
        limit = process_limit()
    except ProcessLimitUnavailable as exc:
        log.warning(
            "bash.process_limit",
            job=job,
            how="none",
            reason=str(exc),
            effect="bash commands are refused",
        )
        return
    level = log.warning if limit.how == "supervisor" else log.info
    level("bash.process_limit", job=job, how=limit.how, limit=limit.limit, detail=limit.describe())


ModelFactory = Callable[..., Model]
"""``factory(spec, **options)`` → a ``Model`` (``workers.make_model`` unless a caller brings its
own). ``options`` are the provider constructor's keywords the job sets — ``max_tokens``,
``timeout``, ``tool_calls`` (``JobSpec.model_options``) — and only those: a job that sets none calls
``factory(spec)``, so a one-argument factory keeps working."""

ModelKey = tuple[str, tuple[tuple[str, Any], ...]]
"""One built model per spec *and* options: the lead and the workers may share a spec but not
their knobs."""


def model_key(spec: str, options: dict[str, Any]) -> ModelKey:
    return spec, tuple(sorted(options.items()))


def run_workspace(info: ThreadInfo, job: JobSpec) -> Path:
    """The directory a run of ``info`` works in: its task's (a worker's, its worktree's), else
    its job's."""
    return Path((info.task or {}).get("workspace") or job.workspace_path)


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
    tasks: dict[str, str | None] = field(default_factory=dict)
    """The task id of each thread in ``spawned``."""
    ended: dict[str, RunOutcome] = field(default_factory=dict)
    ran: set[str] = field(default_factory=set)
    """Every thread this runtime ran (or handed to its executor): what a run's usage counts."""
    model_factory: ModelFactory = make_model
    """Builds a ``Model`` from a spec and options, once per both and job run."""
    _models: dict[ModelKey, Model] = field(default_factory=dict)
    _sem: asyncio.Semaphore | None = None
    _sandbox: SandboxSettings | None = None
    lead: ThreadInfo | None = None
    """The lead thread as the caller has it (its task holds the job's isolation); read once
    from the store when not given."""
    _isolation: Isolation | None = None
    _isolation_loaded: bool = False
    _executor: Executor | None = None
    _lead_now: str | None = None

    @property
    def current_lead(self) -> str:
        """The lead thread running now: the job's first lead, or its newest successor (SPEC
        "Jobs larger than one context"). Workers, readers and forks it makes hang under it;
        ``lead_id`` stays the job's id."""
        return self._lead_now or self.lead_id

    @property
    def executor(self) -> Executor:
        """Where worker runs execute (``executors``: this process, or Temporal hosts)."""
        if self._executor is None:
            self._executor = executor_for(self.job)
        return self._executor

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

    def model_for(self, info: ThreadInfo, model_spec: str | None = None) -> Model:
        """The model a run of ``info`` uses: ``model_spec``, else the thread's own, else the
        job's lead model; with the lead's knobs for a lead, the workers' for the rest."""
        spec = model_spec or info.model or self.job.lead_model
        return self.model(spec, worker=info.kind != Kind.LEAD)

    def adopt_models(self, models: dict[ModelKey, Model]) -> None:
        """Models built (and so validated) before the job was stored: used, and closed, here."""
        self._models.update(models)

    async def aclose(self) -> None:
        if self._executor is not None:
            await self._executor.aclose()
        for m in self._models.values():
            with contextlib.suppress(Exception):
                await m.aclose()
        self._models.clear()

    async def isolation(self) -> Isolation | None:
        """The job's worktree isolation (from its lead thread), or None."""
        if not self._isolation_loaded:
            lead = self.lead
            if lead is None or lead.id != self.lead_id:
                lead = await self.store.get_thread(self.lead_id)
            self._isolation = await Isolation.of_job(self.store, lead, db=self.store.db.path)
            self._isolation_loaded = True
        return self._isolation

    # ------------------------------------------------------------------ refs

    async def task_ref(self, task_id: str) -> str | None:
        """The ref of the newest worker that ran task ``task_id`` in this job."""
        found = None
        for d in await self.store.dispatches.of_job(self.lead_id):
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
            _say_process_limit(format_ref(self.lead_id))
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
        workspace's ``.threadloom`` directory always, and the database's files
        (``isolation.worktrees.DB_FILES``) and the job logs wherever they are: their directory,
        or the files themselves when that directory holds the workspace."""
        workspace = self.job.workspace_path
        hidden = [workspace / ".threadloom"]
        db = self.store.db.path
        if db is None:
            return hidden
        folder = db.parent.resolve()
        if workspace == folder or workspace.is_relative_to(folder):
            names = [*(db.name + sfx for sfx in DB_FILES), "logs"]
            hidden += [folder / n for n in names]
        else:
            hidden.append(folder)
        return hidden

    async def run(
        self, info: ThreadInfo, *, model_spec: str | None = None, message: str | None = None
    ) -> RunOutcome:
        """Run (or continue) any thread of this job with the tools, model and limits its kind
        and stored task call for; a thread that hands off is followed by its successor, to
        the end of the chain (the outcome is the last one's)."""
        outcome = await self._run_one(info, model_spec=model_spec, message=message)
        while outcome.continued_by is not None:
            successor = await self.store.get_thread(outcome.continued_by)
            outcome = await self._run_one(successor, model_spec=model_spec)
        return outcome

    async def _run_one(
        self, info: ThreadInfo, *, model_spec: str | None = None, message: str | None = None
    ) -> RunOutcome:
        self.ran.add(info.id)
        info = await threads.ready_imported(self.store, info, self.job)
        # an imported thread runs as a worker (threadloom's tools, in the sandbox), whatever the
        # kind it was imported as
        as_worker = info.kind == Kind.WORKER or threads.imported(info)
        sandbox = self.sandbox()
        model = self.model_for(info, model_spec)
        tree: WorkerTree | None = None
        after_tools = None
        iso = await self.isolation() if WorkerTree.of(info) is not None else None
        if iso is not None:
            info, tree = await iso.ensure(info)
            if tree is not None:
                after_tools = await iso.checkpointer(info, tree)
        task = info.task or {}
        hand_off: HandOff | None = None
        if info.kind == Kind.LEAD and not as_worker:
            tools: Sequence[Tool[Any]] = lead_tools(self)
            self._lead_now = info.id
            # no run deadline: a lead's time is mostly its workers', each under its own
            # ``timeout_s``; its requests keep theirs, its turns ``max_turns``
            limits = dataclasses.replace(self.config.limits, time_s=None)
            cfg = _ceiling(self.config, self.job.lead_ceiling)
            hand_off = self._lead_hand_off(info)
        elif info.kind == Kind.READER:
            tools = reader_tools(self, target=str(task.get("reader_of", "")))
            limits, cfg = Limits(turns=20, time_s=self.config.limits.time_s), LoopConfig()
        else:
            own = [t for t in info.tools if t not in (SUBMIT_RESULT, threads.READ_OWN)]
            tools = build_tools(own)
            if threads.READ_OWN in info.tools:  # a successor: it may read its predecessors
                tools.append(ReadThreadTool(self, only=await self._predecessors(info)))
            limits = Limits(
                turns=int(task.get("max_turns", self.job.worker.max_turns)),
                time_s=float(task.get("timeout_s", self.job.worker.timeout_s)),
            )
            cfg = LoopConfig(
                output_cap=self.config.output_cap,
                bash_timeout_s=self.config.bash_timeout_s,
                lease_ttl_s=self.config.lease_ttl_s,  # a Temporal host's: its heartbeat's
            )
            ceiling = self.job.worker_ceiling(model.spec)
            if ceiling is not None:
                cfg = _ceiling(cfg, ceiling)
            if info.kind == Kind.WORKER and not threads.imported(info):
                hand_off = self._worker_hand_off(info)
        limits = dataclasses.replace(limits, job_tokens=self.job.budget_tokens or None)  # 0: none
        workspace = run_workspace(info, self.job)
        hook = self._check_hook(info, workspace, iso, tree) if info.kind == Kind.WORKER else None
        outcome = await run_thread(
            self.store,
            info.id,
            model=model,
            tools=tools,
            workspace=workspace,
            config=dataclasses.replace(cfg, limits=limits),
            on_event=self.on_event,
            resolve_task_ref=self.task_ref,
            message=message,
            env=self.env,
            sandbox=sandbox if as_worker else None,
            after_tools=after_tools,
            thread=info,
            check_result=hook,
            hand_off=hand_off,
        )
        if iso is not None and tree is not None and outcome.continued_by is None:
            result = await iso.finish(info, tree, outcome.result)
            outcome = dataclasses.replace(outcome, result=result)
        return outcome

    def _check_hook(
        self, info: ThreadInfo, workspace: Path, iso: Isolation | None, tree: WorkerTree | None
    ) -> CheckHook:
        """The loop's ``check_result`` for a worker (``check``): its lineage read from the store,
        its changes from the worktree diff when it has one (else from its own transcript)."""

        async def hook(result: Result, history: Sequence[Message]) -> Check:
            diff = None
            before = await self._predecessors(info)
            if before:  # a successor's claims may rest on what its predecessors did
                earlier: list[Message] = []
                for tid in reversed(before):
                    earlier += await self.store.messages(tid)
                history = [*earlier, *history]
            if iso is not None and tree is not None:
                try:
                    diff = await iso.changes(tree)
                except WorktreeError as exc:  # the transcript's own record stands in
                    log.warning("check.diff_failed", thread=info.ref, error=str(exc))
            ancestry = await self.store.ancestry(info.id)
            for tid in before:
                ancestry += await self.store.ancestry(tid)
            return check_result(
                result,
                thread_id=info.id,
                history=history,
                ancestry=ancestry,
                diff=diff,
                workspace=str(workspace),
            )

        return hook

    async def _predecessors(self, info: ThreadInfo) -> list[str]:
        """The threads ``info`` continues, newest first (its handoff chain)."""
        found: list[str] = []
        at = info.continues
        while at is not None:
            found.append(at)
            at = (await self.store.get_thread(at)).continues
        return found

    def _lead_hand_off(self, info: ThreadInfo) -> HandOff:
        """How the lead ``info`` hands off: its successor starts from the job's ledger."""

        async def hand_off(lease: Lease, reason: str) -> ThreadInfo:
            try:
                ledger = await handoff_ledger(self.store, self.job, self.lead_id, info)
            except LedgerTooLarge as exc:
                raise HandOffRefused(str(exc)) from None
            new = new_id()
            log.info(
                "lead.handoff",
                thread=info.ref,
                successor=format_ref(new),
                ledger_tokens=ledger.tokens,
                tasks=ledger.tasks,
                collapsed=ledger.collapsed,
            )
            return await self.store.hand_off(
                lease,
                result=Result(status="done", summary=f"Handed off to {format_ref(new)}: {reason}."),
                successor={"id": new},
                messages=[NewMessage.user(ledger.text)],
            )

        return hand_off

    def _worker_hand_off(self, info: ThreadInfo) -> HandOff:
        """How the worker ``info`` hands off: a successor worker of the same task."""

        async def hand_off(lease: Lease, reason: str) -> ThreadInfo:
            history = await self.store.messages(info.id)
            ceiling = self.job.worker_ceiling(info.model or "")
            shown = threads.LAST_TURN_CHARS
            if ceiling is not None:  # the last turn shown takes at most an eighth of it
                shown = min(shown, ceiling * BYTES_PER_TOKEN // 8)
            values, first = threads.worker_successor(
                self.job, info, history, new_id(), reason, shown_chars=shown
            )
            log.info("worker.handoff", thread=info.ref, successor=format_ref(values["id"]))
            return await self.store.hand_off(lease, result=None, successor=values, messages=[first])

        return hand_off

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
        self.ran.add(info.id)
        if self.on_event is not None and self.semaphore.locked():
            # it waits for a slot: live progress shows it queued, not absent
            self.on_event(
                LoopEvent(info.id, "queued", thread_kind=str(info.kind), title=info.title or "")
            )
        async with self.semaphore:
            try:
                outcome = await self.executor.run(
                    self, info, model_spec=model_spec, message=message
                )
            except asyncio.CancelledError:
                raise
            except LeaseHeld:
                if refuse_held:
                    raise  # a resume of a thread that runs elsewhere: refused, nothing appended
                log.warning("worker.held_elsewhere", thread=info.ref)
                # the other runner owns the thread and its dispatch row now: report, don't touch
                return await self.stored_outcome(info, f"{info.ref} is being run by another runner")
            except Exception as exc:
                outcome = await self.stored_outcome(info, str(exc), exc)
                # a run that stored its end logged the crash then, with its traceback: noted
                # here (in the job log), not reported twice; one that never got that far is
                # this layer's to report
                recorded = outcome.status == Status.FAILED
                (log.info if recorded else log.warning)(
                    "worker.crashed", thread=info.ref, error=str(exc)
                )
                await self.store.dispatches.set_status(info.id, str(outcome.status))
            # (a run that ended marked its dispatch row in its last write: ``Store.finish``)
            if outcome.thread_id != info.id and info.id in self.spawned:
                # it handed off: the task's worker is its successor now (one task, one result)
                self.spawned[self.spawned.index(info.id)] = outcome.thread_id
                self.tasks[outcome.thread_id] = self.tasks.pop(info.id, None)
            self.ended[outcome.thread_id] = outcome
            return outcome

    async def stored_outcome(
        self, info: ThreadInfo, error: str | None, exception: BaseException | None = None
    ) -> RunOutcome:
        """The outcome of a run that raised instead of ending: whatever the store now says."""
        latest = await self.store.get_thread(info.id)
        return RunOutcome(
            thread_id=info.id,
            status=latest.status,
            result=latest.result,
            final_text="",
            turns=0,
            usage=await self.store.usage.of_thread(info.id),
            error=error,
            exception=exception,
        )

    # ------------------------------------------------------------------ the job's operations
    # One implementation each, for the lead's tools and for every door (``session``): what
    # differs is a parameter — the dispatch's key, a fork's parent and status, and whether the
    # caller awaits the run it gets back (the lead does: its workers stop with it) or starts
    # it on its own.

    async def dispatch(
        self, tasks: Sequence[TaskInput], *, key: str
    ) -> list[tuple[ThreadInfo, Coroutine[Any, Any, RunOutcome]]]:
        """One worker per task under the current lead, keyed by ``key`` (the lead's tool-use
        id: a replayed lead turn finds the workers it started), each with the run that ends it
        — a worker a replay finds ended is not run again: its run gives its stored end. Each
        task's model is built first: one that cannot be (a bad spec, a missing key, a model the
        caller may not have) refuses the dispatch with nothing stored, rather than leave a
        worker queued that no run can start. New workers are counted in ``spawned``."""
        check_tasks(tasks)  # ids unique in the dispatch (in the job: ``threads``)
        for t in tasks:
            self.model(self.job.worker_spec(t.model), worker=True)
        request = await threads.spawn_request(
            self.store,
            self.job,
            job_id=self.lead_id,
            lead_id=self.current_lead,
            isolation=await self.isolation(),
            tool_use_id=key,
            tasks=tasks,
        )
        out = []
        for info, created in await self.store.dispatches.spawn(request):
            if created:
                self.spawned.append(info.id)
                self.tasks[info.id] = (info.task or {}).get("id")
            ended = info.status in (Status.DONE, Status.FAILED, Status.CANCELLED) and info.result
            run = self.stored_outcome(info, info.error) if ended else self.run_worker(info)
            out.append((info, run))
        return out

    async def ask(
        self, ref: str, question: str, *, model: str | None = None
    ) -> tuple[ThreadInfo, Coroutine[Any, Any, AskOutcome]]:
        """A reader thread under the current lead, with a fresh context, for ``ref`` (the
        thread, or the range the ref names), on ``model`` (default: the workers'), which is
        built before the reader is stored; and the run that answers ``question``, its
        citations checked (the answer is empty when the reader did not end ``done``: its
        status and error say how)."""
        resolved = await self.store.resolve(ref)
        spec = model or self.job.worker_spec()
        self.model(spec, worker=True)
        reader = await threads.create_reader(
            self.store,
            self.job,
            lead_id=self.current_lead,
            target=resolved.thread,
            question=question,
            model=spec,
            focus=resolved.ref if resolved.start else None,
        )
        return reader, self._answer(reader)

    def own_worker(self, info: ThreadInfo) -> ThreadInfo:
        """``info`` if it is a worker of this job (what the lead may read, resume or fork), else
        a ``UsageError``."""
        if info.job_id != self.lead_id or info.kind != Kind.WORKER:
            raise UsageError(f"{info.ref} is not a worker of this job")
        return info

    async def fork(
        self,
        source: ThreadInfo,
        point: int | None,
        message: str | None = None,
        *,
        parent_id: str | None,
        status: Status,
        model: str | None = None,
        build: bool = True,
        worker_only: bool = False,
    ) -> ThreadInfo:
        """A new thread sharing ``source``'s history up to message ``point`` (None: its end; the
        caller finds both with ``threads.fork_point``), then ``message``, stored in the fork's own
        transaction — the lead's ``fork_thread`` and every door's fork store the same thing,
        and a fork is never left without the message it was made for. The caller chooses the
        fork's ``parent_id`` (the lead forking: itself), its ``status`` (``queued`` for one
        run at once, ``idle`` for one that may be left so) and whether and where it runs (a
        run with no message of its own: the message is stored).

        A fork point holds no unanswered tool call: the store refuses a point at a turn whose
        calls are not answered, and forks a mid-turn thread's end at the turn boundary before
        those calls — so there is nothing for the fork's run to answer, and an idle fork is a
        thread any run can take as it is. ``model``: a canonical spec the fork runs on instead
        of its source's. ``build``: the model it will run on is built first, so one that
        cannot be (a bad spec, a missing key) refuses the fork with nothing stored, as
        ``dispatch`` does (False: a caller that checked it, or a fork left idle, whose run
        may have a key this one lacks). ``worker_only``: only a worker of this job may be
        forked (the lead's tool); anything else is a ``UsageError``, nothing stored."""
        threads.check_message(message)
        if worker_only:
            self.own_worker(source)
        if build:
            self.model_for(source, model)
        return await self.store.fork(
            source.id,
            at=point,
            parent_id=parent_id,
            status=status,
            messages=[NewMessage.user(message)] if message else (),
            model=model,
        )

    async def _answer(self, reader: ThreadInfo) -> AskOutcome:
        outcome = await self.run(reader)
        text, kept, dropped = "", list[str](), list[str]()
        if outcome.status == Status.DONE:
            text, kept, dropped = await check_citations(self.store, outcome.final_text)
        return AskOutcome(
            answer=text,
            citations=kept,
            unresolved=dropped,
            reader=reader.ref,
            job=format_ref(self.lead_id),
            status=outcome.status,
            usage=outcome.usage,
            error=outcome.error,
            exception=outcome.exception,
        )


def _ceiling(config: LoopConfig, tokens: int) -> LoopConfig:
    """``config`` for a thread whose requests may hold ``tokens``: it hands off before one would
    hold more, and no single tool output it is shown fills more than a quarter of that (else one
    page read could fill each successor in turn)."""
    cap = min(config.output_cap, max(1_000, tokens * BYTES_PER_TOKEN // 4))
    return dataclasses.replace(config, context_tokens=tokens, output_cap=cap)
