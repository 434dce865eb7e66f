"""The Python API — what every front door (the CLI, the MCP server, the web viewer) uses.

async with Orchestrator.open(".threadloom/threads.db") as orch:
    outcome = await orch.run_job("job.toml")      # a JobOutcome (orchestrator.outcomes)
    page = await orch.read(outcome.workers[0].ref, mode="overview")
    again = await orch.resume(outcome.workers[0].ref, "Also cover the empty input case.")
    shown = await orch.show(outcome.ref)          # SPEC ``show --json``, as every front door
    answer = await orch.ask(outcome.workers[0].ref, "Why did the first run fail?")

Running (``run_job``, ``dispatch``, ``resume``, ``fork``, ``ask``) is a run of a job session
(``orchestrator.session``: the one implementation, which returns handles) waited for at once;
reading (``show``, ``tree``, ``stats``, ``list_threads``, ``search``, ``read``) answers in the SPEC
JSON shapes of ``orchestrator.views``, so no front door computes a shape another needs too. The
runtime and the worker SDKs are imported on first run only: a front door that only reads (``ls``
or ``show`` on the full path, the web viewer) does not pay for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store import SearchHit, Store, ThreadInfo, Usage

from . import views
from .outcomes import AskOutcome, JobOutcome

# what the doors' read tools say of reading a page (the lead's ``read_thread``, MCP's)
from .runtime.pages import (
    DEFAULT_MAX_CHARS as DEFAULT_MAX_CHARS,
    READ_THREAD_DESCRIPTION as READ_THREAD_DESCRIPTION,
    REF_DESCRIPTION as REF_DESCRIPTION,
)

if TYPE_CHECKING:
    from workers import LoopConfig, LoopEvent, Model, RunOutcome

    from .jobs import JobSpec, TaskInput
    from .runtime import JobRuntime, Ledger, ModelFactory, ModelKey
    from .runtime.pages import Mode, Page
    from .session import JobSession


@dataclass(frozen=True, slots=True)
class RunPlace:
    """Where a run of a thread works (``Orchestrator.run_place``): the directory its tools
    work in (and, without the sandbox, its bash may write beyond), and the sandbox of its
    bash (``auto``, ``required`` or ``none``)."""

    workspace: Path
    sandbox: str


async def open_database(db: str, *, create_dirs: bool = False, migrate: bool = True) -> Store:
    """The store at ``db`` as every command opens it: a PostgreSQL URL without a password gets
    the PGPASSWORD the command took out of its environment at start (``workers._secrets``)."""
    from workers import env_var

    return await Store.open(
        db, create_dirs=create_dirs, migrate=migrate, password=env_var("PGPASSWORD")
    )


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
        """How threads run (``workers.LoopConfig()`` unless given); a worker's limits: its job's."""
        if self._config is None:
            from workers import LoopConfig

            self._config = LoopConfig()
        return self._config

    @classmethod
    async def open(cls, db: str, *, create_dirs: bool = False, **kw: Any) -> Orchestrator:
        return cls(await open_database(db, create_dirs=create_dirs), owns_store=True, **kw)

    async def close(self) -> None:
        if self._owns_store:
            await self.store.close()

    async def __aenter__(self) -> Orchestrator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ running (``session``)

    def session(self, **kw: Any) -> JobSession:
        """The one place a job's runs start (``session.JobSession``): each returns a handle to
        wait on or cancel. Close it (``aclose``, or ``async with``)."""
        from .session import JobSession

        return JobSession(self, **kw)

    async def run_job(self, job: JobSpec | str | os.PathLike[str], **overrides: Any) -> JobOutcome:
        """Run a job (a ``JobSpec`` or a job file) to the end."""
        async with self.session() as s:
            return await (await s.start_job(job, **overrides)).wait()

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

    async def dispatch(
        self, job_ref: str, tasks: Sequence[TaskInput | Mapping[str, Any]]
    ) -> list[RunOutcome]:
        """Run more tasks in an existing job (from Python, without the lead's model): each a
        ``TaskInput`` or a dict of its fields (``JobSession.dispatch``)."""
        async with self.session() as s:
            return [await run.wait() for run in await s.dispatch(job_ref, tasks)]

    async def resume(
        self, ref: str, message: str | None = None, *, model: str | None = None, **knobs: Any
    ) -> JobOutcome:
        """Continue a thread (its handoff chain's newest) with its whole history and ``message``;
        a lead's ref resumes the whole job: finished workers reused, interrupted ones resumed.
        ``knobs``: this run's own run options (``jobs.RunKnobs``: ``max_output_tokens``,
        ``request_timeout_s``), for every thread it runs."""
        async with self.session() as s:
            run = await s.resume(ref, message, model=model, refuse_running=False, knobs=knobs)
            return await run.wait()

    async def check_resume(
        self, ref: str, message: str | None = None, *, model: str | None = None
    ) -> ThreadInfo:
        """What ``resume`` would refuse, refused with nothing stored (``JobSession``'s)."""
        return await self.session().check_resume(ref, message, model=model)

    async def fork(
        self,
        ref: str,
        message: str | None = None,
        *,
        model: str | None = None,
        run: bool = True,
        **knobs: Any,
    ) -> JobOutcome | ThreadInfo:
        """A new thread sharing ``ref``'s history up to its anchor (default: the end), then
        ``message``; run to the end unless ``run`` is False (then the fork is returned, idle).
        ``knobs``: the run's own run options, as ``resume``'s."""
        async with self.session() as s:
            got = await s.fork(ref, message, model=model, run=run, knobs=knobs)
            return got if isinstance(got, ThreadInfo) else await got.wait()

    async def ask(self, ref: str, question: str, *, model: str | None = None) -> AskOutcome:
        """A reader thread with a fresh context reads ``ref``'s transcript (the thread, or the
        range the ref names) and answers ``question`` with citations that are checked to
        resolve (``JobSession.ask``)."""
        async with self.session() as s:
            return await (await s.ask(None, ref, question, model=model)).wait()

    async def run_place(self, ref: str) -> RunPlace:
        """Where a run of ``ref`` (resumed, or forked) works, and its bash's sandbox: what a
        front door that confines its callers to some directories checks before it starts one
        (``RunPlace``)."""
        from .runtime import run_workspace

        info = (await self.store.resolve(ref)).thread
        job = await self.session().job_for(info)
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
