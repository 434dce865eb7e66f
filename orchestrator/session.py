"""One job session: the operations that run a job's threads — start a job, dispatch, ask,
resume, fork — each checked before anything is stored and returning a handle (``Run``) on the
work, which outlives the call that started it; ``wait`` and ``cancel`` collect or stop it.

Every door goes through it. A blocking call of the API is a run waited for at once
(``Orchestrator.resume`` is ``await (await session.resume(...)).wait()``); a front door whose
calls are cut after a minute (an MCP client's tool call) keeps one session, returns the refs of
what still runs and collects them later with ``wait`` on refs, as often as it likes.

It keeps nothing a caller needs between calls. The store is the truth: a thread's terminal status
is written before its run ends, so whether a ref has ended is read from the store, and a second
caller (or one that reconnected) waits on the same refs and sees the same thing. Threads another
process runs are waited for by polling the store; the asyncio tasks held here only let a wait
wake the moment a run of this process ends, and let ``cancel`` stop it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import structlog

from store import (
    Kind,
    Status,
    StatusError,
    Store,
    TextBlock,
    ThreadInfo,
    finish_uncancelled,
    new_id,
)

from . import chain
from .errors import EXIT_USAGE, OrchestratorError, UsageError
from .jobs import JobSpec, TaskInput, for_one_run, load_job
from .outcomes import AskOutcome, JobOutcome
from .runtime import JobRuntime, check_message, create_lead, fork_point, job_of
from .runtime.lead_tools import check_citations
from .runtime.outcome import job_outcome, usage_by_thread
from .runtime.report_check import check_report
from .views import result_json

if TYPE_CHECKING:
    import os

    from workers import RunOutcome

    from .api import Orchestrator

log = structlog.get_logger("threadloom.session")

T = TypeVar("T")
WaitMode = Literal["all", "any"]
ProgressFn = Callable[[int, int, str], Awaitable[None]]
"""``on_progress(ended, total, message)``: called while a wait waits."""

_LIVE = (Status.QUEUED, Status.RUNNING)


class SessionError(OrchestratorError, ValueError):
    """A request the session refuses (one line naming the ref and why): exit 2."""

    exit_code = EXIT_USAGE


class Run(Generic[T]):
    """A handle on work that outlives the call that started it: ``thread`` is what runs (a
    job's lead, a worker, a reader, a resumed or forked thread); ``await run.wait()`` gives how
    it ended, ``await run.cancel()`` stops it (``JobSession.cancel``)."""

    def __init__(self, session: JobSession, thread: ThreadInfo, task: asyncio.Task[T]) -> None:
        self.session = session
        self.thread = thread
        self.task = task
        self.awaited = False

    @property
    def ref(self) -> str:
        return self.thread.ref

    async def wait(self) -> T:
        self.awaited = True  # what it raises is its waiter's to report, not the log's
        return await self.task

    async def cancel(self) -> list[ThreadInfo]:
        return await self.session.cancel(self.ref)


@dataclass(frozen=True, slots=True)
class Waited:
    """What a wait saw when it returned: every ref asked for, ended or still running."""

    ended: list[ThreadInfo]
    pending: list[ThreadInfo]
    threads: list[ThreadInfo]
    """All of them, in the order asked for."""


class JobSession:
    """The runs started on ``orch``, held until they end; close it (``aclose``, ``async with``)
    to stop what still runs (left ``interrupted``, resumable) and close its model clients.

    ``poll_s`` is how often a wait re-reads threads that run in another process;
    ``progress_every_s`` how often a waiting caller hears that it is still waiting."""

    def __init__(
        self, orch: Orchestrator, *, poll_s: float = 0.5, progress_every_s: float = 5.0
    ) -> None:
        self.orch = orch
        self.poll_s = poll_s
        self.progress_every_s = progress_every_s
        self._runs: dict[str, Run[Any]] = {}
        self._job_of_run: dict[str, str] = {}
        self._runtimes: dict[str, JobRuntime] = {}
        self._leads_lock = asyncio.Lock()
        self._leads: dict[tuple[str, str], str] = {}
        """The lead found for each (name, workspace): found once per process."""
        self._cancelling: set[str] = set()

    @property
    def store(self) -> Store:
        return self.orch.store

    async def __aenter__(self) -> JobSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ jobs and leads

    async def start_job(
        self, job: JobSpec | str | os.PathLike[str], **overrides: Any
    ) -> Run[JobOutcome]:
        """Run a job (a ``JobSpec`` or a job file): its lead plans, dispatches, reports. What
        can be checked is, before anything is stored (exit 2; a dead endpoint exit 4): the
        executor, the lead's context, every model the job names (built now), a repository
        that cannot be isolated. The run's thread is the lead."""
        from .isolation import record_job_base, start_job
        from .runtime import check_lead_context
        from .runtime.executors import check_executor

        spec = job if isinstance(job, JobSpec) else load_job(Path(job), **overrides)
        check_executor(spec, self.store)
        check_lead_context(spec)
        lead_options, worker_options = (spec.model_options(worker=w) for w in (False, True))
        wanted = [(spec.lead_model, lead_options), (spec.worker_spec(), worker_options)]
        wanted += [(spec.model_for(t), worker_options) for t in spec.tasks]
        models = await self.orch.build_models(wanted)
        base = None
        if spec.isolation == "worktree":
            base = await start_job(spec.workspace_path, db=self.store.db.path, remote=spec.remote)
        lead = await create_lead(
            self.store, spec, isolation=base.to_json() if base is not None else None
        )
        if base is not None:
            await record_job_base(base, lead.id)
        rt = self.orch.runtime(spec, lead.id)
        rt.lead = lead
        rt.adopt_models(models)
        return self._start(lead, lead.id, self._ran(rt, rt.run(lead)))

    async def lead(self, job: JobSpec, *, models: Sequence[str] = ()) -> ThreadInfo:
        """The lead of a front door's job: the newest lead titled ``job.name`` whose job works in
        ``job``'s workspace, else a new one. It is never run by a model (the front door's caller
        is the lead), so it stays ``idle``; its workers, readers and usage make a job like any
        other (``tree``, ``stats``, the budget).

        One lead per name and workspace, whatever else the spec says: one found with other
        settings (the server restarted with other flags) gets this spec stored, so its runs
        follow the settings in force. A new one is stored only once ``models`` (the workers'
        specs the first call needs) have been built: a call refused for its model — a missing
        key, a model the caller may not have — stores nothing."""
        wanted = job.model_dump(mode="json")
        key = (job.name, str(job.workspace_path))
        async with self._leads_lock:  # two first calls at once make one lead, not two
            found = self._leads.get(key)
            info = await self.store.get_thread(found) if found else await self._find_lead(job)
            if info is None:
                options = job.model_options(worker=True)
                await self.orch.check_models([(m, options) for m in models])
                info = await create_lead(self.store, job, status=Status.IDLE)
            elif (info.task or {}).get("job") != wanted:
                task = {**(info.task or {}), "job": wanted}
                info = await self.store.update_thread(info.id, task=task, model=job.lead_model)
            self._leads[key] = info.id
            return info

    async def _find_lead(self, job: JobSpec) -> ThreadInfo | None:
        """The newest lead titled ``job.name`` whose stored job works where ``job`` does."""
        for info in await self.store.list_threads(kind=Kind.LEAD):
            stored = (info.task or {}).get("job")
            if info.title != job.name or not isinstance(stored, dict):
                continue
            try:
                if JobSpec.model_validate(stored).workspace_path == job.workspace_path:
                    return info
            except ValueError:
                continue  # a spec this version cannot read: not this caller's lead
        return None

    async def job_for(self, info: ThreadInfo, knobs: Mapping[str, Any] | None = None) -> JobSpec:
        """The job a run of ``info`` belongs to: its lead's; a thread outside any job (imported,
        say) runs in the current directory. ``knobs``: this run's own run options
        (``jobs.for_one_run``)."""
        root = await self.lead_of(info)
        if root.kind == Kind.LEAD and (root.task or {}).get("job"):
            job = job_of(root)
        else:
            job = JobSpec(
                name=root.title or root.ref,
                goal="(continue the thread)",
                model=info.model or "anthropic:claude-sonnet-4-5",
                base_dir=str(Path.cwd()),
            )
        return for_one_run(job, **(knobs or {}))

    async def lead_of(self, info: ThreadInfo) -> ThreadInfo:
        return info if info.id == info.job_id else await self.store.get_thread(info.job_id)

    def _runtime(self, job: JobSpec, job_id: str) -> JobRuntime:
        """One runtime per job for as long as this session lives (dispatches and readers): its
        semaphore bounds the job's running workers across calls, its model clients are reused."""
        rt = self._runtimes.get(job_id)
        if rt is None:
            rt = self._runtimes[job_id] = self.orch.runtime(job, job_id)
        return rt

    # ------------------------------------------------------------------ starting work

    async def dispatch(
        self, job: ThreadInfo | str, tasks: Sequence[TaskInput | Mapping[str, Any]]
    ) -> list[Run[RunOutcome]]:
        """One worker per task under ``job`` (its lead, or any ref of it), started at once.
        A task given as a dict is held to every door's rules (``TaskInput``; its title, left
        out, is its id). Every model the tasks name is built first (``JobRuntime.dispatch``),
        so a bad spec or a missing key is refused with nothing stored."""
        given = [
            t if isinstance(t, TaskInput) else TaskInput.model_validate({"title": t.get("id"), **t})
            for t in tasks
        ]
        lead = job if isinstance(job, ThreadInfo) else await self.lead_of(await self._thread(job))
        rt = self._runtime(job_of(lead), lead.id)
        work = await rt.dispatch(given, key=f"api-{new_id()}")  # a key of its own: never replayed
        return [self._start(info, lead.id, run) for info, run in work]

    async def ask(
        self, lead: ThreadInfo | None, ref: str, question: str, *, model: str | None = None
    ) -> Run[AskOutcome]:
        """A reader thread with a fresh context reads ``ref``'s transcript (the thread, or the
        range the ref names) and answers ``question`` with citations that are checked to
        resolve — what the lead's ``ask_thread`` does. It hangs under ``lead`` (default: the
        lead of ``ref``'s job) and runs on ``model`` (default: that job's workers' model), which
        is built before anything is stored: a bad spec or a missing key is refused with nothing
        changed, as an empty question is."""
        if not question.strip():
            raise UsageError("the question is empty: say what you want to know about the thread")
        target = await self._thread(ref)
        if lead is None:
            job, job_id = await self.job_for(target), target.job_id
        else:
            job, job_id = job_of(lead), lead.id
        spec = _canonical(model) if model is not None else None
        reader, answer = await self._runtime(job, job_id).ask(ref, question, model=spec)
        return self._start(reader, job_id, answer)

    async def resume(
        self,
        ref: str,
        message: str | None = None,
        *,
        model: str | None = None,
        refuse_running: bool = True,
        knobs: Mapping[str, Any] | None = None,
    ) -> Run[JobOutcome]:
        """Continue a thread (its handoff chain's newest) with its whole history and ``message``;
        a lead's ref resumes the whole job: finished workers reused, interrupted ones resumed.
        What it would refuse (``check_resume``) is refused now, with nothing stored, as is
        (``refuse_running``) a thread that runs now — else a thread another runner holds is
        refused by its lease when the run starts. ``knobs``: this run's own run options
        (``jobs.RunKnobs``: the model-call knobs), for every thread it runs."""
        named = await self._idle(ref) if refuse_running else None
        info = await self.check_resume(ref, message, model=model, knobs=knobs)
        if named is not None and info.id != named.id:
            info = await self._idle(info.ref)
        if model is not None:
            info = await self.store.update_thread(info.id, model=_canonical(model))
        run = self._run_existing(info, message=message, knobs=knobs)
        return self._start(info, info.job_id, run)

    async def check_resume(
        self,
        ref: str,
        message: str | None = None,
        *,
        model: str | None = None,
        knobs: Mapping[str, Any] | None = None,
    ) -> ThreadInfo:
        """Everything ``resume`` would refuse, refused now with nothing stored: a ref to a
        message or range (resume continues a thread from its end; ``fork`` branches off at a
        message), an empty message, and a model that cannot be built (a spec that does not
        parse, a scripted file that cannot be read, a provider's missing key). The thread."""
        resolved = await self.store.resolve(ref)
        if resolved.start is not None:
            raise UsageError(
                f"resume takes a thread, not a message or a range ({ref.strip()[:80]}): resume"
                f" {resolved.thread.ref} continues it from its end; fork {ref.strip()[:80]}"
                " branches off at that message"
            )
        info = await chain.newest(self.store, resolved.thread)  # handed off: its newest
        await self._check(info, message, model, build=True, knobs=knobs)
        return info

    async def fork(
        self,
        ref: str,
        message: str | None = None,
        *,
        at: int | None = None,
        model: str | None = None,
        run: bool = True,
        knobs: Mapping[str, Any] | None = None,
    ) -> Run[JobOutcome] | ThreadInfo:
        """A new thread sharing ``ref``'s history up to message ``at`` (else the ref's anchor,
        else the end), then ``message``; run unless ``run`` is False (then the fork is returned,
        idle; its model is then only parsed, not built: it may need a key the fork's run will
        have). A point past the end is the fork's to refuse (``ForkPointError``). The fork is
        the job's operation (``JobRuntime.fork``, the lead's ``fork_thread`` too): here it
        hangs under no thread and is stored idle, with ``message``, whether it runs or not.
        ``knobs``: the run's own run options (``resume``'s); a fork that does not run takes
        none."""
        given = [k for k, v in (knobs or {}).items() if v is not None]
        if given and not run:
            said = ", ".join(given)
            raise UsageError(f"{said}: set for a run, and a fork that does not run has none")
        source, point = await fork_point(self.store, ref, at)
        await self._check(source, message, model, build=run, knobs=knobs)
        rt = self._runtime(await self.job_for(source), source.job_id)
        spec = _canonical(model) if model is not None else None
        fork = await rt.fork(
            source, point, message, parent_id=None, status=Status.IDLE, model=spec, build=False
        )
        if not run:
            return fork
        return self._start(fork, fork.job_id, self._run_existing(fork, knobs=knobs))

    async def _check(
        self,
        info: ThreadInfo,
        message: str | None,
        model: str | None,
        *,
        build: bool,
        knobs: Mapping[str, Any] | None = None,
    ) -> None:
        """A message that says something, a ``model`` spec that parses and (``build``) the
        model a run of ``info`` would use (with the run's ``knobs``, held to their bounds)
        built, its endpoint reached, then closed: what is bad is refused (exit 2; 4 for the
        endpoint) before anything is stored."""
        check_message(message)
        spec = _canonical(model) if model is not None else None
        if not build:
            return
        from workers import preflight

        rt = self.orch.runtime(await self.job_for(info, knobs), info.job_id)
        try:
            await preflight([rt.model_for(info, spec)])  # a dead endpoint: exit 4, as for run
        finally:
            await rt.aclose()

    async def _run_existing(
        self,
        info: ThreadInfo,
        *,
        message: str | None = None,
        knobs: Mapping[str, Any] | None = None,
    ) -> JobOutcome:
        job = await self.job_for(info, knobs)
        # what this run uses is counted from here: a resumed or forked thread's earlier turns,
        # and the rest of its job, were another run's
        before = await usage_by_thread(self.store, info.job_id)
        rt = self.orch.runtime(job, info.job_id)
        if info.id == info.job_id:
            rt.lead = info
        if info.kind == Kind.LEAD:
            return await self._ran(rt, rt.run(info, message=message), before=before)
        run = rt.run_worker(info, message=message, refuse_held=True)
        return await self._ran(rt, run, before=before)

    @staticmethod
    async def _ran(
        rt: JobRuntime,
        run: Coroutine[Any, Any, RunOutcome],
        *,
        before: dict[str, Any] | None = None,
    ) -> JobOutcome:
        """``run`` on its own runtime, closed after it: the job's outcome in SPEC's shape."""
        try:
            outcome = await run
        finally:
            await rt.aclose()
        return await job_outcome(rt, outcome, before=before)

    # ------------------------------------------------------------------ waiting

    async def wait(
        self,
        refs: Sequence[str],
        *,
        mode: WaitMode = "all",
        timeout_s: float,
        on_progress: ProgressFn | None = None,
    ) -> Waited:
        """Until every ref (``all``) or one of them (``any``) has ended, or ``timeout_s``
        passes; never longer. ``on_progress`` hears how many have ended every
        ``progress_every_s`` and whenever that number grows."""
        ids: list[str] = []
        for ref in refs:
            tid = (await self._thread(ref)).id
            if tid not in ids:
                ids.append(tid)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        tick = loop.time() + self.progress_every_s
        told = 0
        while True:
            # a thread that handed off is waited for through its chain's newest thread
            infos = [await chain.newest(self.store, await self.store.get_thread(t)) for t in ids]
            ended = [i for i in infos if self.ended(i)]
            pending = [i for i in infos if not self.ended(i)]
            now = loop.time()
            if not pending or (mode == "any" and ended) or now >= deadline:
                return Waited(ended=ended, pending=pending, threads=infos)
            if on_progress is not None and (len(ended) > told or now >= tick):
                told = len(ended)
                tick = now + self.progress_every_s
                await on_progress(len(ended), len(infos), _progress_text(ended, pending))
            runs = [t for t, i in zip(ids, infos, strict=True) if not self.ended(i)]
            held = [self._runs[t].task for t in runs if t in self._runs]
            nap = min(deadline, tick if on_progress is not None else deadline) - now
            if len(held) < len(pending):
                nap = min(nap, self.poll_s)  # some run in another process: poll the store
            if held:
                await asyncio.wait(held, timeout=max(nap, 0.0), return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(max(nap, 0.0))

    def ended(self, info: ThreadInfo) -> bool:
        """Whether a thread is not running: a run of this session counts until its task has
        finished (a resumed thread still shows its old terminal status before it starts)."""
        run = self._runs.get(info.id)
        if (run is not None and not run.task.done()) or info.id in self._cancelling:
            return False
        return info.status not in _LIVE

    async def describe(self, info: ThreadInfo) -> dict[str, Any]:
        """One ref as a caller waiting on it sees it: its status and, once it has ended, what
        it produced — a worker's distilled result, a reader's checked answer, a lead's report."""
        out: dict[str, Any] = {
            "ref": info.ref,
            "kind": str(info.kind),
            "task": (info.task or {}).get("id"),
            "status": str(info.status),
        }
        if not self.ended(info):
            return out
        if info.kind == Kind.READER:
            text, kept, dropped = await check_citations(self.store, await self._final_text(info))
            out["result"] = {
                "answer": text,
                "citations": kept,
                "unresolved": dropped,
                "reader": info.ref,
            }
        elif info.kind == Kind.LEAD:
            report = await check_report(self.store, await self._final_text(info))
            out["result"] = {"report": report}
        elif info.result is not None:
            out["result"] = result_json(info.result)  # with its check (SPEC "Checked results")
        if info.error:
            out["error"] = info.error
        return out

    async def _final_text(self, info: ThreadInfo) -> str:
        """The text of the thread's last assistant message (a lead's report, a reader's
        answer), or ``""``: read from the store, whichever process ran it."""
        for msg in reversed(await self.store.messages(info.id, start=max(1, info.head_seq - 3))):
            if msg.role == "assistant":
                return "\n".join(b.text for b in msg.content if isinstance(b, TextBlock)).strip()
        return ""

    # ------------------------------------------------------------------ cancelling

    async def cancel(self, ref: str) -> list[ThreadInfo]:
        """Stop a thread run by this session (a lead: its whole job's runs here too) and mark
        it ``cancelled`` (SPEC: the status of a thread its user cancelled). A running thread is
        stopped as a stop leaves it — every in-flight tool call answered with the interrupted
        marker, its effect unknown, but a turn of calls safe to replay (a lead's ``dispatch``),
        left for the resume to run again — and then marked; one that had not started yet is marked
        at once. Either stays resumable. A thread another process runs is refused. Waiters
        see the thread ended only once it is marked."""
        info = await self._thread(ref)
        targets = [info.id]
        if info.kind == Kind.LEAD:
            targets += [t for t, job in self._job_of_run.items() if job == info.id]
        targets = list(dict.fromkeys(targets))
        held = [self._runs[t].task for t in targets if t in self._runs]
        if not held and info.status in _LIVE:
            raise SessionError(f"{info.ref} is run by another process; stop it there")
        # a job run here (``start_job``) runs its workers inside the lead's task: they stop with it
        if info.kind == Kind.LEAD and info.id in self._runs:
            for t in await self.store.job_tree(info.id):
                if t.status in _LIVE and t.id not in targets:
                    targets.append(t.id)
        self._cancelling.update(targets)
        try:
            for task in held:
                task.cancel()
            if held:
                await asyncio.wait(held)
            return [await finish_uncancelled(self._mark_cancelled(tid)) for tid in targets]
        finally:
            self._cancelling.difference_update(targets)

    async def _mark_cancelled(self, thread_id: str) -> ThreadInfo:
        latest = await self.store.get_thread(thread_id)
        if latest.kind == Kind.LEAD and latest.status == Status.IDLE:
            return latest  # an MCP client's lead: never run here, nothing to cancel
        stopped = (Status.IDLE, Status.QUEUED, Status.INTERRUPTED)
        if latest.status not in stopped:
            return latest  # it ended on its own first, or another runner has it now
        try:
            latest = await self.store.set_status(
                thread_id, Status.CANCELLED, error="cancelled", expect=stopped
            )
        except StatusError:
            return await self.store.get_thread(thread_id)  # resumed meanwhile
        if latest.kind == Kind.WORKER:
            await self.store.dispatches.set_status(thread_id, str(Status.CANCELLED))
        log.info("thread.cancelled", thread=latest.ref)
        return latest

    async def aclose(self) -> None:
        """Stop every run still going (their threads are left ``interrupted``, resumable) and
        close the runtimes' model clients."""
        tasks = [r.task for r in self._runs.values() if not r.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for rt in self._runtimes.values():
            await rt.aclose()
        self._runtimes.clear()

    # ------------------------------------------------------------------ internals

    async def _thread(self, ref: str) -> ThreadInfo:
        return (await self.store.resolve(ref)).thread

    async def _idle(self, ref: str) -> ThreadInfo:
        info = await self._thread(ref)
        run = self._runs.get(info.id)
        if (run is not None and not run.task.done()) or info.status == Status.RUNNING:
            raise SessionError(f"{info.ref} is running; wait for it or cancel it first")
        return info

    def _start(self, thread: ThreadInfo, job_id: str, work: Coroutine[Any, Any, T]) -> Run[T]:
        run = Run(self, thread, asyncio.create_task(work))
        self._runs[thread.id] = run
        self._job_of_run[thread.id] = job_id
        run.task.add_done_callback(lambda t: self._forget(run))
        return run

    def _forget(self, run: Run[Any]) -> None:
        tid, task = run.thread.id, run.task
        if self._runs.get(tid) is run:
            del self._runs[tid]
            self._job_of_run.pop(tid, None)
        if not run.awaited and not task.cancelled() and task.exception() is not None:
            # the thread's status and error are in the store already; the log says how
            log.warning("session.run_raised", thread=tid, error=str(task.exception()))


def _progress_text(ended: list[ThreadInfo], pending: list[ThreadInfo]) -> str:
    running = sum(1 for i in pending if i.status == Status.RUNNING)
    return f"{len(ended)} ended, {running} running, {len(pending) - running} queued"


def _canonical(model: str) -> str:
    """A model spec as it is stored: parsed (``ModelSpecError`` if it does not), canonical."""
    from workers import parse_model_spec

    return str(parse_model_spec(model))
