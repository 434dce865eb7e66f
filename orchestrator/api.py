"""The Python API — what every front door (the CLI, the MCP server, the web viewer) uses.

async with Orchestrator.open(".threadloom/threads.db") as orch:
    outcome = await orch.run_job("job.toml")      # a JobOutcome (orchestrator.outcomes)
    page = await orch.read(outcome.workers[0].ref, mode="overview")
    again = await orch.resume(outcome.workers[0].ref, "Also cover the empty input case.")
    shown = await orch.show(outcome.ref)          # SPEC ``show --json``, as every front door
    answer = await orch.ask(outcome.workers[0].ref, "Why did the first run fail?")

Running (``run_job``, ``dispatch``, ``resume``, ``fork``) goes through ``orchestrator.runtime``;
reading (``show``, ``tree``, ``stats``, ``list_threads``, ``search``, ``read``) answers in the SPEC
JSON shapes of ``orchestrator.views``, so no front door computes a shape another needs too. The
runtime and the worker SDKs are imported on first run only: a front door that only reads (``ls``
or ``show`` on the full path, the web viewer) does not pay for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store import (
    Kind,
    NewMessage,
    SearchHit,
    Status,
    Store,
    ThreadInfo,
    ThreadRef,
    Usage,
    format_ref,
    new_id,
)

from . import chain, views
from .errors import UsageError
from .outcomes import AskOutcome, JobOutcome

# what the doors' read tools say of reading a page (the lead's ``read_thread``, MCP's)
from .runtime.pages import DEFAULT_MAX_CHARS as DEFAULT_MAX_CHARS
from .runtime.pages import READ_THREAD_DESCRIPTION as READ_THREAD_DESCRIPTION
from .runtime.pages import REF_DESCRIPTION as REF_DESCRIPTION

if TYPE_CHECKING:
    from workers import LoopConfig, LoopEvent, Model, RunOutcome

    from .jobs import JobSpec
    from .runtime import JobRuntime, Ledger, ModelFactory, ModelKey
    from .runtime.pages import Mode, Page


@dataclass(frozen=True, slots=True)
class RunPlace:
    """Where a run of a thread works (``Orchestrator.run_place``): the directory its tools
    work in (and, without the sandbox, its bash may write beyond), and the sandbox of its
    bash (``auto``, ``required`` or ``none``)."""

    workspace: Path
    sandbox: str


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
        self._config = config
        self.env = env
        self._owns_store = owns_store

    @property
    def config(self) -> LoopConfig:
        """The loop's limits for every thread run (``workers.LoopConfig()`` unless given)."""
        if self._config is None:
            from workers import LoopConfig

            self._config = LoopConfig()
        return self._config

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

    async def run_job(
        self,
        job: JobSpec | str | os.PathLike[str],
        *,
        on_lead: Callable[[ThreadInfo], None] | None = None,
        **overrides: Any,
    ) -> JobOutcome:
        """Run a job (a ``JobSpec`` or a job file) to the end. ``on_lead`` is told the lead as
        soon as it is stored: a caller that does not wait for the end needs its ref at once
        (``orchestrator.background``)."""
        from .isolation import record_job_base, start_job
        from .jobs import JobSpec, load_job
        from .runtime import create_lead

        spec = job if isinstance(job, JobSpec) else load_job(Path(job), **overrides)
        from .runtime.executors import check_executor

        check_executor(spec, self.store)  # exit 2 before anything is stored
        from .runtime import check_lead_context

        check_lead_context(spec)  # a lead_context_tokens no ledger fits: exit 2, nothing stored
        # Everything that can be checked before anything is stored: every model the job names
        # is built now, so a bad one is exit 2 with nothing stored, never a lead left queued.
        lead_options, worker_options = (spec.model_options(worker=w) for w in (False, True))
        wanted = [(spec.lead_model, lead_options)]
        wanted.append((spec.worker_spec(), worker_options))
        wanted += [(spec.model_for(t), worker_options) for t in spec.tasks]
        models = await self.build_models(wanted)
        base = None
        if spec.isolation == "worktree":
            # refused (exit 2) before anything is stored when the repository can't be isolated
            base = await start_job(spec.workspace_path, db=self.store.db.path, remote=spec.remote)
        lead = await create_lead(
            self.store, spec, isolation=base.to_json() if base is not None else None
        )
        if base is not None:
            await record_job_base(base, lead.id)
        if on_lead is not None:
            on_lead(lead)
        rt = self.runtime(spec, lead.id)
        rt.lead = lead
        rt.adopt_models(models)
        try:
            outcome = await rt.run(lead)
        finally:
            await rt.aclose()
        from .runtime.outcome import job_outcome

        return await job_outcome(rt, outcome)

    async def build_models(
        self, wanted: Iterable[tuple[str, dict[str, Any]]]
    ) -> dict[ModelKey, Model]:
        """Each (spec, provider options) built once, through this orchestrator's model factory:
        a scripted file read and compiled, a provider's key looked up, a caller's model policy
        applied, each endpoint reached once (``workers.preflight``: a dead one is exit 4, now).
        What is bad raises here, with what was built closed: checked before anything is stored
        (hand what is returned to the runtime: ``JobRuntime.adopt_models``)."""
        from workers import preflight

        from .runtime import model_key

        models: dict[ModelKey, Model] = {}
        try:
            for name, options in wanted:
                key = model_key(name, options)
                if key not in models:
                    models[key] = self._make_model(name, **options)
            await preflight(models.values())
        except BaseException:
            for built in models.values():
                await built.aclose()
            raise
        return models

    async def check_models(self, wanted: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """``build_models``, then closed: whether they can be built (raises why not)."""
        for built in (await self.build_models(wanted)).values():
            await built.aclose()

    async def dispatch(self, job_ref: str, tasks: Sequence[dict[str, Any]]) -> list[RunOutcome]:
        """Run more tasks in an existing job (from Python, without the lead's model)."""
        from .runtime import job_of

        lead = await self._lead_of(await self._thread(job_ref))
        rt = self.runtime(job_of(lead), lead.id)
        try:
            spawned = await rt.spawn_workers(tool_use_id=f"api-{new_id()}", tasks=tasks)
            return [await rt.run_worker(info) for info, _ in spawned]
        finally:
            await rt.aclose()

    # ------------------------------------------------------------------ threads

    async def resume(
        self, ref: str, message: str | None = None, *, model: str | None = None
    ) -> JobOutcome:
        """Continue a thread (its handoff chain's newest) with its whole history and ``message``;
        a lead's ref resumes the whole job: finished workers reused, interrupted ones resumed."""
        info = await self.check_resume(ref, message, model=model)
        if model is not None:
            info = await self.store.update_thread(info.id, model=_canonical(model))
        return await self._run_existing(info, message=message)

    async def check_resume(
        self, ref: str, message: str | None = None, *, model: str | None = None
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
        await self._check(info, message, model, build=True)
        return info

    async def fork(
        self,
        ref: str,
        message: str | None = None,
        *,
        model: str | None = None,
        run: bool = True,
    ) -> JobOutcome | ThreadInfo:
        """A new thread sharing ``ref``'s history up to its anchor (default: the end), then
        ``message``; run to the end unless ``run`` is False (then the fork is returned, idle;
        its model is then only parsed, not built: it may need a key the fork's run will have)."""
        source, at = await self._fork_source(ref)
        await self._check(source, message, model, build=run)
        fork = await self.store.fork(
            source.id,
            at=at,
            status=Status.IDLE,
            messages=[NewMessage.user(message)] if message else (),
        )
        if model is not None:
            fork = await self.store.update_thread(fork.id, model=_canonical(model))
        if not run:
            return fork
        return await self._run_existing(fork)

    async def ask(self, ref: str, question: str, *, model: str | None = None) -> AskOutcome:
        """A reader thread with a fresh context reads ``ref``'s transcript (the thread, or the
        range the ref names) and answers ``question`` with citations that are checked to
        resolve — what the lead's ``ask_thread`` does (``runtime.lead_tools.ask``). The reader
        hangs under the lead of ``ref``'s job and runs on ``model`` (default: the job's workers'
        model), which is built before anything is stored: a bad spec or a missing key is
        refused with nothing changed, as an empty question is."""
        from .runtime.lead_tools import ask

        if not question.strip():
            raise UsageError("the question is empty: say what you want to know about the thread")
        resolved = await self.store.resolve(ref)
        target = resolved.thread
        job = await self._job_for(target)
        spec = _canonical(model) if model is not None else job.worker_spec()
        rt = self.runtime(job, target.job_id)
        try:
            rt.model(spec, worker=True)  # built now: refused before the reader is stored
            got = await ask(
                rt, target, question, model=spec, focus=resolved.ref if resolved.start else None
            )
        finally:
            await rt.aclose()
        outcome = got.outcome
        return AskOutcome(
            answer=got.answer,
            citations=got.citations,
            unresolved=got.unresolved,
            reader=got.reader.ref,
            job=format_ref(target.job_id),
            status=outcome.status,
            usage=outcome.usage,
            error=outcome.error,
            exception=outcome.exception,
        )

    async def check_fork(
        self, ref: str, message: str | None = None, *, model: str | None = None
    ) -> ThreadInfo:
        """Everything a running ``fork`` would refuse before it stores the fork: an empty
        message and a model that cannot be built (``check_resume``). The thread forked from."""
        info, _ = await self._fork_source(ref)
        await self._check(info, message, model, build=True)
        return info

    async def run_place(self, ref: str) -> RunPlace:
        """Where a run of ``ref`` (resumed, or forked) works, and its bash's sandbox: what a
        front door that confines its callers to some directories checks before it starts one
        (``RunPlace``)."""
        from .runtime import run_workspace

        info = (await self.store.resolve(ref)).thread
        job = await self._job_for(info)
        if (info.task or {}).get("worktree"):
            # a worktree is threadloom's own copy of the job's workspace (under the
            # repository's git directory): the job's workspace is the place it works on
            workspace = job.workspace_path
        else:
            workspace = run_workspace(info, job)
        return RunPlace(workspace=workspace.resolve(), sandbox=job.worker_sandbox)

    async def isolation_writes(self, workspace: Path) -> list[Path]:
        """Where worktree isolation of a job in ``workspace`` writes besides it: the
        repository's top level and git directory (``RepoStateError`` when it is none). A front
        door that confines its callers checks them before it starts one."""
        from .isolation import job_writes

        return await job_writes(workspace)

    async def _fork_source(self, ref: str) -> tuple[ThreadInfo, int | None]:
        """The thread ``ref`` names and its fork point (its anchor's last message; none: the
        thread's end). A point past the end is the fork's to refuse (``ForkPointError``, which
        names the thread's messages), not the ref's."""
        parsed = ThreadRef.parse(ref)
        info = (await self.store.resolve(parsed.thread)).thread
        return info, parsed.end if parsed.has_anchor else None

    async def _check(
        self, info: ThreadInfo, message: str | None, model: str | None, *, build: bool
    ) -> None:
        """A message that says something, a ``model`` spec that parses and (``build``) the
        model a run of ``info`` would use built, its endpoint reached, then closed: what is bad
        is refused (exit 2; 4 for the endpoint) before anything is stored."""
        check_message(message)
        spec = _canonical(model) if model is not None else None
        if not build:
            return
        from workers import preflight

        rt = self.runtime(await self._job_for(info), info.job_id)
        try:
            await preflight([rt.model_for(info, spec)])  # a dead endpoint: exit 4, as for run
        finally:
            await rt.aclose()

    async def read(
        self,
        ref: str,
        *,
        mode: Mode = "messages",
        pattern: str | None = None,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> Page:
        """A bounded page of any thread (SPEC ``read_thread``), with the ref of the next."""
        from .runtime import read_page

        return await read_page(self.store, ref, mode=mode, pattern=pattern, max_chars=max_chars)

    async def search(
        self, query: str, *, job: str | None = None, limit: int = 20
    ) -> list[SearchHit]:
        """Full-text hits, best first (``views.hit_json`` gives each its SPEC ``search`` shape);
        ``job``: only the job around that ref."""
        job_id = (await self._thread(job)).job_id if job else None
        return await self.store.search(query, job_id=job_id, limit=limit)

    # ------------------------------------------------------------------ reading, as SPEC shapes

    async def search_json(
        self, query: str, *, job: str | None = None, limit: int = 20
    ) -> list[dict[str, Any]]:
        """SPEC ``search --json``: ``search``'s hits as ``[{ref, thread, seq, role, snippet}]``."""
        return [views.hit_json(h) for h in await self.search(query, job=job, limit=limit)]

    async def show(self, ref: str, *, messages: bool = True) -> dict[str, Any]:
        """SPEC ``show --json`` of ``ref``: a thread (its whole visible history, a fork's
        inherited messages included) or the seq range the ref names (``T-…#7``, ``T-…#7-12``,
        ``T-…#7-`` — the one range syntax every front door takes); ``messages=False`` leaves
        the messages out (metadata, result and usage only)."""
        return (await self.thread_view(ref, messages=messages)).to_json()

    async def thread_view(self, ref: str, *, messages: bool = True) -> views.ThreadView:
        """What ``show`` is made of (for a front door that renders it itself, as the CLI's text
        does): the thread, its messages (or the range), usage and cost."""
        resolved = await self.store.resolve(ref)
        info = resolved.thread
        start = resolved.start or 1
        msgs = before = None
        if messages:
            msgs = await self.store.messages(info.id, start=start, end=resolved.end)
            before = await self.store.message(info.id, start - 1) if start > 1 else None
        totals = await self.store.usage.totals(thread_id=info.id)
        return views.ThreadView(
            info,
            msgs,
            usage=totals[0].usage if totals else Usage(),
            cost=totals[0].cost_usd if totals else 0.0,
            start=resolved.start,
            end=resolved.end,
            before=before,
        )

    async def tree(self, ref: str) -> dict[str, Any]:
        """SPEC ``tree --json``: the job around ``ref`` as nested spawn and fork edges."""
        focus = await self._thread(ref)
        threads = await self.store.job_tree(focus.job_id)
        totals = {t.thread_id: t for t in await self.store.usage.totals(job_id=focus.job_id)}
        return views.tree_json(focus, threads, totals, empty=Usage())

    async def ledger(self, ref: str) -> Ledger:
        """The ledger of the job around ``ref`` as its newest lead would hand it off now (SPEC
        "Jobs larger than one context"): ``runtime.ledger``'s one rendering."""
        from .chain import newest
        from .runtime import handoff_ledger, job_of

        root = await self._lead_of(await self._thread(ref))
        lead = await newest(self.store, root)
        return await handoff_ledger(self.store, job_of(root), root.id, lead)

    async def stats(self, ref: str | None = None) -> dict[str, Any]:
        """SPEC ``stats --json``. With ``ref``: every thread of the job around it and the job's
        total; without: every thread of each job that used tokens — those that used none
        counted too, so a job has as many threads here as ``tree`` shows — one row per job,
        the total."""
        if ref:
            focus = await self._thread(ref)
            infos = await self.store.job_tree(focus.job_id)
            totals = {t.thread_id: t for t in await self.store.usage.totals(job_id=focus.job_id)}
        else:
            totals = {t.thread_id: t for t in await self.store.usage.totals()}
            threads = await self.store.list_threads(oldest_first=True)
            used = {t.job_id for t in threads if t.id in totals}
            infos = [t for t in threads if t.job_id in used]
        leads: dict[str, ThreadInfo | None] = {t.id: t for t in infos if t.id == t.job_id}
        for job_id in {t.job_id for t in infos} - leads.keys():
            leads[job_id] = await self.store.get_thread(job_id)  # a lead that used no tokens
        return views.stats_json(infos, totals, leads)

    async def list_threads(
        self,
        *,
        job: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        limit: int | None = views.LS_LIMIT,
        before: str | None = None,
    ) -> list[dict[str, Any]]:
        """SPEC ``ls --json``: threads, newest first; ``job`` (any thread's ref: the job around
        it), ``status`` and ``kind`` filter; ``limit`` None or 0 lists all; ``before`` (a
        thread's ref, the last of a page): only threads older than it, the next page."""
        job_id = (await self._thread(job)).job_id if job else None
        older = (await self._thread(before)).id if before else None
        rows = await self.store.list_threads(
            job_id=job_id, status=status, kind=kind, limit=limit or None, older_than=older
        )
        return [views.thread_json(t) for t in rows]

    # ------------------------------------------------------------------ worktree jobs

    async def diff(self, ref: str, *, stat: bool = False) -> dict[str, Any]:
        """A worker's work against its job's base (``{ref, branch, base, tip, of, diff}``): its
        branch, or with ``T-…#n`` its files after message n; ``stat``: only the diff stat."""
        from .isolation import worker_diff

        return await worker_diff(self.store, ref, stat=stat)

    async def merge(self, refs: Sequence[str], *, into: str | None = None) -> dict[str, Any]:
        """Merge the workers' branches, in order, into ``into`` (default: the job branch);
        conflicts are reported, never resolved: ``{into, created, head, merged, already_merged,
        conflicts: [{ref, branch, files}]}``."""
        from .isolation import merge_refs

        return (await merge_refs(self.store, list(refs), into=into)).to_json()

    async def gc(self, *, job: str | None = None, branches: bool = False) -> dict[str, Any]:
        """Remove the worktrees of finished jobs (``job``: only the one around that ref);
        ``branches``: their branches and checkpoint refs too. ``{removed, kept, deleted_refs}``."""
        from .isolation import gc

        job_id = (await self._thread(job)).job_id if job else None
        return (await gc(self.store, job_id=job_id, branches=branches)).to_json()

    # ------------------------------------------------------------------ scale-out

    async def serve_worker(
        self, *, address: str | None, task_queue: str, slots: int, ready: Any = None
    ) -> None:
        """Execute worker runs of Temporal jobs on this host until cancelled (``threadloom
        worker``): ``slots`` at once, from ``task_queue`` of the cluster at ``address``
        (default: env ``THREADLOOM_TEMPORAL_ADDRESS``). Needs a PostgreSQL store."""
        from .runtime.executors import require_shared_store, require_temporal

        require_shared_store(self.store, "threadloom worker")
        require_temporal("threadloom worker")
        from .runtime.temporal.executor import temporal_address
        from .runtime.temporal.host import serve

        await serve(
            self.store,
            address=temporal_address(address),
            task_queue=task_queue,
            slots=slots,
            ready=ready,
            model_factory=self.model_factory,
        )

    # ------------------------------------------------------------------ internals

    def _make_model(self, spec: str, **options: Any) -> Model:
        from workers import make_model, parse_model_spec

        parse_model_spec(spec)
        return (self.model_factory or make_model)(spec, **options)

    def runtime(self, job: JobSpec, lead_id: str) -> JobRuntime:
        """A runtime for running threads of the job led by ``lead_id`` with this
        orchestrator's events, limits, environment and model factory (close it: ``aclose``)."""
        from workers import make_model

        from .runtime import JobRuntime

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
        from .jobs import JobSpec
        from .runtime import job_of

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
        # what this run uses is counted from here: a resumed or forked thread's earlier turns,
        # and the rest of its job, were another run's
        from .runtime.outcome import job_outcome, usage_by_thread

        before = await usage_by_thread(self.store, info.job_id)
        rt = self.runtime(job, info.job_id)
        if info.id == info.job_id:
            rt.lead = info
        try:
            if info.kind == Kind.LEAD:
                outcome = await rt.run(info, message=message)
            else:
                outcome = await rt.run_worker(info, message=message, refuse_held=True)
        finally:
            await rt.aclose()
        return await job_outcome(rt, outcome, before=before)


def _canonical(model: str) -> str:
    """A model spec as it is stored: parsed (``ModelSpecError`` if it does not), canonical."""
    from workers import parse_model_spec

    return str(parse_model_spec(model))


def check_message(message: str | None) -> None:
    """A message given to a thread says something: an empty one would be stored for good."""
    if message is not None and not message.strip():
        raise UsageError("the message is empty: say what the thread should do next")
