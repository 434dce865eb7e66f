"""Work that runs on while its caller goes on: the part of a front door that cannot block.

A front door whose calls are cut after a minute (an MCP client's tool call, a web request)
cannot run a worker to its end inside one call. ``Background`` starts the work — workers under
a lead, a whole job, a resumed or forked thread, a reader — and returns its refs at once; callers
then wait on refs with a timeout, as often as they like, and may cancel.

It keeps nothing a caller needs between calls. The store is the truth: a thread's terminal status
is written before its run ends, so whether a ref has ended is read from the store, and a second
caller (or one that reconnected) waits on the same refs and sees the same thing. Threads another
process runs are waited for by polling the store; the asyncio tasks held here only let a wait
wake the moment a run of this process ends, and let ``cancel`` stop it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal

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

from .api import Orchestrator
from .chain import newest
from .errors import EXIT_USAGE, OrchestratorError
from .jobs import JobSpec
from .runtime import JobRuntime, create_lead, job_of
from .runtime.lead_tools import check_citations
from .runtime.report_check import check_report
from .views import result_json

log = structlog.get_logger("threadloom.background")

WaitMode = Literal["all", "any"]
ProgressFn = Callable[[int, int, str], Awaitable[None]]
"""``on_progress(ended, total, message)``: called while a wait waits."""

_LIVE = (Status.QUEUED, Status.RUNNING)


class BackgroundError(OrchestratorError, ValueError):
    """A request the background runner refuses (one line naming the ref and why): exit 2."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True, slots=True)
class Waited:
    """What a wait saw when it returned: every ref asked for, ended or still running."""

    ended: list[ThreadInfo]
    pending: list[ThreadInfo]
    threads: list[ThreadInfo]
    """All of them, in the order asked for."""


class Background:
    """Starts runs on ``orch`` without waiting for them; ``wait`` collects them by ref.

    ``poll_s`` is how often a wait re-reads threads that run in another process;
    ``progress_every_s`` how often a waiting caller hears that it is still waiting."""

    def __init__(
        self, orch: Orchestrator, *, poll_s: float = 0.5, progress_every_s: float = 5.0
    ) -> None:
        self.orch = orch
        self.poll_s = poll_s
        self.progress_every_s = progress_every_s
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._job_of_task: dict[str, str] = {}
        self._runtimes: dict[str, JobRuntime] = {}
        self._leads_lock = asyncio.Lock()
        self._leads: dict[tuple[str, str], str] = {}
        """The lead found for each (name, workspace): found once per process."""
        self._cancelling: set[str] = set()

    @property
    def store(self) -> Store:
        return self.orch.store

    # ------------------------------------------------------------------ leads

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

    def runtime(self, lead: ThreadInfo) -> JobRuntime:
        """One runtime per lead for as long as this runner lives: its semaphore bounds the
        job's running workers across calls, and its model clients are reused."""
        rt = self._runtimes.get(lead.id)
        if rt is None:
            rt = self._runtimes[lead.id] = self.orch.runtime(job_of(lead), lead.id)
        return rt

    # ------------------------------------------------------------------ starting work

    async def dispatch(self, lead: ThreadInfo, tasks: Sequence[dict[str, Any]]) -> list[ThreadInfo]:
        """One worker per task under ``lead``, started at once; returns the workers (queued).
        Every model the tasks name is built first (``JobRuntime.spawn_workers``), so a bad
        spec or a missing key is refused with nothing stored."""
        rt = self.runtime(lead)
        spawned = await rt.spawn_workers(tool_use_id=f"bg-{new_id()}", tasks=tasks)
        for info, _created in spawned:
            self._start(info.id, lead.id, rt.run_worker(info))
        return [info for info, _ in spawned]

    async def start_job(self, spec: JobSpec) -> ThreadInfo:
        """Run a whole job (its lead plans, dispatches, reports) in the background; returns its
        lead as soon as it is stored. A job refused before anything is stored (a bad model, a
        repository that cannot be isolated) raises here."""
        created: asyncio.Future[ThreadInfo] = asyncio.get_running_loop().create_future()

        def on_lead(lead: ThreadInfo) -> None:
            if not created.done():
                created.set_result(lead)

        task = asyncio.create_task(self.orch.run_job(spec, on_lead=on_lead))
        first: list[asyncio.Future[Any]] = [task, created]
        await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        if not created.done():
            task.result()  # refused before the lead was stored: raises why
            raise BackgroundError(f"job {spec.name!r} ended before its lead was stored")
        lead = created.result()
        self._hold(lead.id, lead.id, task)
        return lead

    async def resume(self, ref: str, message: str | None, *, model: str | None) -> ThreadInfo:
        """Continue a thread with its whole history (and ``message``) in the background. What
        ``resume`` would refuse (an empty message, a model that cannot be built) is refused
        here, before the run starts, with nothing stored. A thread that handed off is
        continued by the newest of its chain (``chain.newest``), which is returned."""
        named = await self._idle(ref)
        info = await self.orch.check_resume(named.ref, message, model=model)
        if info.id != named.id:
            info = await self._idle(info.ref)
        self._start(info.id, info.job_id, self.orch.resume(info.ref, message, model=model))
        return info

    async def fork(
        self,
        ref: str,
        message: str | None,
        *,
        at: int | None = None,
        model: str | None = None,
        run: bool = True,
    ) -> ThreadInfo:
        """A fork of ``ref`` (at message ``at``, else at the ref's anchor, else the end) with
        ``message``, run in the background unless ``run`` is False."""
        if at is not None:
            ref = f"{(await self.store.resolve(ref)).thread.ref}#{at}"
        if run:  # a model the run cannot build is refused before the fork is stored
            await self.orch.check_fork(ref, message, model=model)
        fork = await self.orch.fork(ref, message, model=model, run=False)
        assert isinstance(fork, ThreadInfo)
        if run:
            self._start(fork.id, fork.job_id, self.orch.resume(fork.ref, model=None))
        return fork

    async def ask(self, lead: ThreadInfo, ref: str, question: str) -> ThreadInfo:
        """A reader (a fresh context, under ``lead``) that answers ``question`` about ``ref``;
        its answer is collected with ``wait`` and ``answer``."""
        target = (await self.store.resolve(ref)).thread
        rt = self.runtime(lead)
        rt.model(rt.job.worker_spec(), worker=True)  # the reader's (``create_reader``)
        reader = await rt.create_reader(target, question)
        self._start(reader.id, lead.id, rt.run(reader))
        return reader

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
            tid = (await self.store.resolve(ref)).thread.id
            if tid not in ids:
                ids.append(tid)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        tick = loop.time() + self.progress_every_s
        told = 0
        while True:
            # a thread that handed off is waited for through its chain's newest thread
            infos = [await newest(self.store, await self.store.get_thread(t)) for t in ids]
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
            held = [self._tasks[t] for t in runs if t in self._tasks]
            nap = min(deadline, tick if on_progress is not None else deadline) - now
            if len(held) < len(pending):
                nap = min(nap, self.poll_s)  # some run in another process: poll the store
            if held:
                await asyncio.wait(held, timeout=max(nap, 0.0), return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(max(nap, 0.0))

    def ended(self, info: ThreadInfo) -> bool:
        """Whether a thread is not running: a run of this process counts until its task has
        finished (a resumed thread still shows its old terminal status before it starts)."""
        task = self._tasks.get(info.id)
        if (task is not None and not task.done()) or info.id in self._cancelling:
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
            out["result"] = await self.answer(info)
        elif info.kind == Kind.LEAD:
            report = await check_report(self.store, await self.final_text(info))
            out["result"] = {"report": report}
        elif info.result is not None:
            out["result"] = result_json(info.result)  # with its check (SPEC "Checked results")
        if info.error:
            out["error"] = info.error
        return out

    async def final_text(self, info: ThreadInfo) -> str:
        """The text of the thread's last assistant message (a lead's report, a reader's
        answer), or ``""``."""
        for msg in reversed(await self.store.messages(info.id, start=max(1, info.head_seq - 3))):
            if msg.role == "assistant":
                return "\n".join(b.text for b in msg.content if isinstance(b, TextBlock)).strip()
        return ""

    async def answer(self, reader: ThreadInfo) -> dict[str, Any]:
        """A finished reader's answer with its citations checked (``[not found]`` marks the ones
        that do not resolve, as the lead's ``ask_thread`` does)."""
        text, kept, dropped = await check_citations(self.store, await self.final_text(reader))
        return {"answer": text, "citations": kept, "unresolved": dropped, "reader": reader.ref}

    # ------------------------------------------------------------------ cancelling

    async def cancel(self, ref: str) -> list[ThreadInfo]:
        """Stop a thread run by this process (a lead: its whole job's runs here too) and mark
        it ``cancelled`` (SPEC: the status of a thread its user cancelled). A running thread is
        stopped as a stop leaves it — every in-flight tool call answered with the interrupted
        marker, its effect unknown, but a turn of calls safe to replay (a lead's ``dispatch``),
        left for the resume to run again — and then marked; one that had not started yet is marked
        at once. Either stays resumable. A thread another process runs is refused. Waiters
        see the thread ended only once it is marked."""
        info = (await self.store.resolve(ref)).thread
        targets = [info.id]
        if info.kind == Kind.LEAD:
            targets += [t for t, job in self._job_of_task.items() if job == info.id]
        targets = list(dict.fromkeys(targets))
        held = [self._tasks[t] for t in targets if t in self._tasks]
        if not held and info.status in _LIVE:
            raise BackgroundError(f"{info.ref} is run by another process; stop it there")
        # a job run here (``start_job``) runs its workers inside the lead's task: they stop with it
        if info.kind == Kind.LEAD and info.id in self._tasks:
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
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for rt in self._runtimes.values():
            await rt.aclose()
        self._runtimes.clear()

    # ------------------------------------------------------------------ internals

    async def _idle(self, ref: str) -> ThreadInfo:
        info = (await self.store.resolve(ref)).thread
        task = self._tasks.get(info.id)
        if (task is not None and not task.done()) or info.status == Status.RUNNING:
            raise BackgroundError(f"{info.ref} is running; wait for it or cancel it first")
        return info

    def _start(self, thread_id: str, job_id: str, run: Coroutine[Any, Any, Any]) -> None:
        self._hold(thread_id, job_id, asyncio.create_task(run))

    def _hold(self, thread_id: str, job_id: str, task: asyncio.Task[Any]) -> None:
        self._tasks[thread_id] = task
        self._job_of_task[thread_id] = job_id
        task.add_done_callback(lambda t: self._forget(thread_id, t))

    def _forget(self, thread_id: str, task: asyncio.Task[Any]) -> None:
        if self._tasks.get(thread_id) is task:
            del self._tasks[thread_id]
            self._job_of_task.pop(thread_id, None)
        if not task.cancelled() and task.exception() is not None:
            # the thread's status and error are in the store already; the log says how
            log.warning("background.run_raised", thread=thread_id, error=str(task.exception()))


def _progress_text(ended: list[ThreadInfo], pending: list[ThreadInfo]) -> str:
    running = sum(1 for i in pending if i.status == Status.RUNNING)
    return f"{len(ended)} ended, {running} running, {len(pending) - running} queued"
