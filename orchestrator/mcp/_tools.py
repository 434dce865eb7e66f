"""threadloom's MCP tools that start or stop work (SPEC §Wave 2 — MCP server): the lead's tools,
for a client's agent. The read-only ones are ``_reading``.

No tool blocks longer than its ``wait_s``/``timeout_s`` (at most 50 s: clients cut a call at
about 60 s, and none of them implements MCP Tasks). Work that is still running then is returned
as refs and collected with ``wait``; while a call waits it sends progress notifications.

Every call that starts work is checked before anything is stored: its tasks and titles (the job
file's rules), the models it names (``model_policy``: where a key may go, scripted models), and
where the work would run against the client's roots (``_roots``) — a resume or fork included,
wherever the thread came from.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, cast

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from store import Kind, Status

from ..jobs import MAX_TITLE_CHARS, RUN_OPTIONS, TITLE_HELP, JobSpec, TaskInput, check_tasks
from ..session import Run, Waited
from ._answers import (
    DEFAULT_WAIT_S,
    LIVE,
    MAX_REFS,
    MODEL_FORMS,
    READ_ONLY,
    STARTS_WORK,
    Ref,
    Seconds,
    WaitSeconds,
    answer,
    bounded,
    tool,
)
from ._refusals import refusals
from ._roots import ClientRoots, Roots

if TYPE_CHECKING:
    from ._server import Threadloom

WorkersModel = Annotated[
    str | None,
    Field(
        description="The workers' model for this call (a task's own model wins); default: the"
        f" server's --worker-model, else its --model. {MODEL_FORMS}"
    ),
]
RunModel = Annotated[
    str | None,
    Field(description=f"The model this run goes on with; default: the thread's own. {MODEL_FORMS}"),
]
Workspace = Annotated[
    str | None,
    Field(
        description="Directory the work happens in (relative: to your first root); it must"
        " lie within your roots; default: your first root, else the server's directory"
    ),
]
F = TypeVar("F", bound=Callable[..., Any])
KEYWORD = inspect.Parameter.KEYWORD_ONLY


def with_run_options(fn: F, *, door: Literal["mcp", "thread"] = "mcp") -> F:
    """``fn`` with its ``**options`` made the run options MCP takes (``jobs.RUN_OPTIONS``), before
    its keyword-only parameters: each optional (None: the server's default, else the job
    file's), typed and bounded by its ``JobSpec`` field, a model's saying what a client may name.
    ``door``: ``run_job``'s options, or (``thread``) those of a run of a thread that exists."""
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    options = []
    for o in RUN_OPTIONS:
        said = getattr(o, door)
        if said:
            field = JobSpec.model_fields[o.key]
            said = f"{said} {MODEL_FORMS}" if o.metavar == "SPEC" else said
            kind = Annotated.__class_getitem__(  # type: ignore[attr-defined]
                (cast(Any, field.annotation) | None, *field.metadata, Field(description=said))
            )
            options.append(inspect.Parameter(o.key, KEYWORD, default=None, annotation=kind))
    keyword = [p for p in own if p.kind is KEYWORD]
    params = [p for p in own if p.kind is not KEYWORD] + options + keyword
    setattr(fn, "__signature__", sig.replace(parameters=params))  # noqa: B010
    return fn


def register_tools(app: Threadloom) -> None:
    server = app.server
    bg = app.session

    async def waited(
        refs: list[str], mode: Literal["all", "any"], timeout_s: float, ctx: Context[Any, Any]
    ) -> Waited:
        async def report(ended: int, total: int, message: str) -> None:
            await ctx.report_progress(ended, total, message)

        return await bg.wait(refs, mode=mode, timeout_s=timeout_s, on_progress=report)

    async def entries(w: Waited) -> list[dict[str, Any]]:
        """Each ref as the wait saw it. One still pending then is reported running on, even
        if the store says otherwise: a run this server started has not taken its thread yet
        (the store still shows how it last ended, for a resume, or ``idle``, for a new fork),
        or it ended since and its result is the next wait's. A caller reading the old
        ``done`` (and the old result) would never collect the new one."""
        pending = {i.id for i in w.pending}
        out = []
        for info in w.threads:
            entry = await bg.describe(info)
            if info.id in pending:
                entry = {k: v for k, v in entry.items() if k not in ("result", "error")}
                if entry["status"] not in LIVE:
                    entry["status"] = str(Status.QUEUED)
            out.append(entry)
        return bounded(out)

    def client_job(ctx: Context[Any, Any], roots: Roots, workspace: str | None) -> JobSpec:
        """The spec of the client's job where this call works (one lead per workspace)."""
        return app.job_spec(app.client_name(ctx), roots.place(app.settings.cwd, workspace))

    async def one(ref: str, wait_s: float, ctx: Context[Any, Any]) -> dict[str, Any]:
        w = await waited([ref], "all", wait_s, ctx)
        return (await entries(w))[0]

    async def confined(ref: str, listed: ClientRoots) -> None:
        """A resume or fork of ``ref`` runs where the thread works: within the roots, with
        the sandbox — whoever started the thread, through whichever door."""
        Roots.of(listed).check_run(await app.orch.run_place(ref), ref)

    @tool(server, annotations=STARTS_WORK)
    async def dispatch(
        tasks: Annotated[
            list[TaskInput],
            Field(
                min_length=1,
                max_length=MAX_REFS,
                description="One task per worker, run in parallel (up to the server's"
                " --max-parallel at once)",
            ),
        ],
        ctx: Context[Any, Any],
        roots: ClientRoots,
        workspace: Workspace = None,
        model: WorkersModel = None,
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
    ) -> CallToolResult:
        """Run tasks on fresh-context workers in parallel. Each worker sees only its task's
        prompt (name files, failing tests, constraints, what to report) and ends with a
        distilled result. Workers done within wait_s carry their result; the rest are pending:
        collect them with `wait`. Task ids are unique in your job, across calls."""
        with refusals():
            check_tasks(tasks)
            app.models(model, *(t.model for t in tasks))
            job = client_job(ctx, Roots.of(roots), workspace)
            given = [t.model_copy(update={"model": t.model or model}) for t in tasks]
            lead = await bg.lead(job, models=[job.worker_spec(t.model) for t in given])
            workers = await bg.dispatch(lead, given)
            w = await waited([run.ref for run in workers], "all", wait_s, ctx)
            return answer(
                {
                    "job": lead.ref,
                    "workers": await entries(w),
                    "pending": [i.ref for i in w.pending],
                }
            )

    @tool(server, annotations=READ_ONLY)
    async def wait(
        refs: Annotated[
            list[Ref],
            Field(min_length=1, max_length=MAX_REFS, description="Threads to wait for"),
        ],
        ctx: Context[Any, Any],
        mode: Annotated[
            Literal["all", "any"],
            Field(description="all: until every one has ended; any: until one has"),
        ] = "all",
        timeout_s: Seconds = DEFAULT_WAIT_S,
    ) -> CallToolResult:
        """Wait until all (or any) of these threads have ended, at most timeout_s seconds.
        Returns each ref's status, with its result once it ended; `pending` lists the ones
        still running (call wait again with them)."""
        with refusals():
            w = await waited(refs, mode, timeout_s, ctx)
            return answer({"workers": await entries(w), "pending": [i.ref for i in w.pending]})

    @tool(server, annotations=STARTS_WORK)
    @with_run_options
    async def run_job(
        name: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_TITLE_CHARS,
                description=f"The job's name, its lead thread's title. {TITLE_HELP}",
            ),
        ],
        goal: Annotated[
            str,
            Field(min_length=1, description="What the job is for: the lead plans from it"),
        ],
        ctx: Context[Any, Any],
        roots: ClientRoots,
        tasks: Annotated[
            list[TaskInput] | None,
            Field(
                max_length=1000,
                description="Tasks the lead dispatches first (as a job file's [[task]]);"
                " default: none, the lead plans them",
            ),
        ] = None,
        workspace: Workspace = None,
        *,
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
        **options: Any,
    ) -> CallToolResult:
        """Run a whole job as a job file would ([job] keys and tasks as arguments): a lead
        model plans, dispatches workers, reviews and reports. Returns the job's ref at once if
        it runs past wait_s; collect the report with `wait([job])`."""
        with refusals():
            given = {
                **options,
                "model": options["model"] or app.settings.model,
                "worker_model": options["worker_model"] or app.settings.worker_model,
            }
            worker = options["worker"]
            app.models(given["model"], given["worker_model"], *(t.model for t in tasks or []))
            confine = Roots.of(roots)
            ws = confine.place(app.settings.cwd, workspace)
            confine.check_sandbox(options["sandbox"], what="sandbox")
            confine.check_sandbox(worker.sandbox if worker else None, what="worker.sandbox")
            if options["isolation"] == "worktree" and confine.dirs:
                for place in await app.orch.isolation_writes(ws):
                    confine.check(place, what="worktree isolation writes to")
            spec = JobSpec.from_input(  # the job file's rules: unique task ids, one-line titles
                {
                    "name": name,
                    "goal": goal,
                    "workspace": str(ws),
                    "base_dir": str(app.settings.cwd),
                    "tasks": [t.model_dump(exclude_none=True) for t in tasks or []],
                    **{k: v for k, v in given.items() if v is not None},
                }
            )
            lead = (await bg.start_job(spec)).thread
            entry = await one(lead.ref, wait_s, ctx)
            out = {"job": lead.ref, "lead": lead.ref, "status": entry["status"]}
            if "result" in entry:
                out["report"] = entry["result"]["report"]
            return answer(out)

    @tool(server, annotations=STARTS_WORK)
    async def ask_thread(
        ref: Ref,
        question: Annotated[str, Field(min_length=1, description="What to find out")],
        ctx: Context[Any, Any],
        roots: ClientRoots,
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
    ) -> CallToolResult:
        """A reader with a fresh context reads that thread and answers with citations (T-…#n)
        that are checked to resolve. If it takes longer than wait_s, `wait([reader])`."""
        with refusals():
            job = client_job(ctx, Roots.of(roots), None)
            lead = await bg.lead(job, models=[job.worker_spec()])
            reader = await bg.ask(lead, ref, question)
            entry = await one(reader.ref, wait_s, ctx)
            if "result" in entry:
                return answer(entry["result"])
            return answer({"answer": None, "citations": [], "reader": reader.ref, **entry})

    @tool(server, annotations=STARTS_WORK)
    @functools.partial(with_run_options, door="thread")
    async def resume_thread(
        ref: Ref,
        message: Annotated[str, Field(min_length=1, description="What to do next")],
        ctx: Context[Any, Any],
        roots: ClientRoots,
        model: RunModel = None,
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
        **knobs: Any,
    ) -> CallToolResult:
        """Continue a thread with its whole history and this message; same ref. Returns its
        new result if it ends within wait_s, else its status (collect it with `wait`). It runs
        where the thread works, which must lie within your roots."""
        with refusals():
            await refuse_client_lead(ref)
            app.models(model)
            await confined(ref, roots)
            info = await bg.resume(ref, message, model=model, knobs=knobs)
            return answer(await one(info.ref, wait_s, ctx))

    @tool(server, annotations=STARTS_WORK)
    @functools.partial(with_run_options, door="thread")
    async def fork_thread(
        ref: Ref,
        message: Annotated[str, Field(min_length=1, description="What the fork does differently")],
        ctx: Context[Any, Any],
        roots: ClientRoots,
        at: Annotated[int | None, Field(ge=1, description="Fork after this message")] = None,
        no_run: Annotated[
            bool, Field(description="Store the fork without running it (resume it later)")
        ] = False,
        model: RunModel = None,
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
        **knobs: Any,
    ) -> CallToolResult:
        """A new thread sharing ref's history up to message `at` (default: the end), then this
        message, run on (unless no_run) where ref works, which must lie within your roots. The
        original is untouched."""
        with refusals():
            await refuse_client_lead(ref)
            app.models(model)
            await confined(ref, roots)
            got = await bg.fork(ref, message, at=at, model=model, run=not no_run, knobs=knobs)
            fork = got.thread if isinstance(got, Run) else got
            entry = await one(fork.ref, 0 if no_run else wait_s, ctx)
            origin = fork.forked_from
            entry["forked_from"] = {"ref": origin.ref, "at": origin.at} if origin else None
            return answer(entry)

    @tool(server, annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def cancel(ref: Ref) -> CallToolResult:
        """Stop a thread (a job's ref: all of its runs) and mark it cancelled; a tool call it
        had under way is answered as interrupted (a lead's dispatch is left for resume_thread
        to replay, reusing the job's workers). Resumable with resume_thread. `cancelled`
        lists the threads this call stopped or marked; `not_running` those it left as they
        were (already ended, or never run)."""
        with refusals():
            before = await statuses(ref)
            cancelled: list[dict[str, str]] = []
            left: list[dict[str, str]] = []
            for info in await bg.cancel(ref):
                row = {"ref": info.ref, "status": str(info.status)}
                was = before.get(info.id)
                marked = info.status == Status.CANCELLED and was != Status.CANCELLED
                (cancelled if marked else left).append(row)
            return answer({"cancelled": cancelled, "not_running": left})

    async def statuses(ref: str) -> dict[str, Status]:
        """The status of each thread a cancel of ``ref`` may touch (its job's, for a lead),
        before it does."""
        info = (await app.orch.store.resolve(ref)).thread
        threads = await app.orch.store.job_tree(info.job_id) if info.kind == Kind.LEAD else []
        return {t.id: t.status for t in [info, *threads]}

    async def refuse_client_lead(ref: str) -> None:
        info = (await app.orch.store.resolve(ref)).thread
        if info.kind == Kind.LEAD and (info.title or "").startswith("mcp: "):
            raise ToolError(
                f"{info.ref} is the lead of an MCP client's job (the client's agent): resume or"
                " fork one of its workers instead"
            )
