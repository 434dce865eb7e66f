"""threadloom's MCP tools (SPEC §Wave 2 — MCP server): the lead's tools, for a client's agent.

No tool blocks longer than its ``wait_s``/``timeout_s`` (at most 50 s: clients cut a call at
about 60 s, and none of them implements MCP Tasks). Work that is still running then is returned
as refs and collected with ``wait``; while a call waits it sends progress notifications. Every
answer is bounded well under the 25,000 tokens Claude Code accepts from one tool call.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from store import Kind, Status, ThreadInfo
from workers.tools import TOOL_REGISTRY

from ..background import Waited
from ..jobs import (
    MAX_TITLE_CHARS,
    TITLE_HELP,
    JobSpec,
    WorkerDefaults,
)
from ..runtime import DEFAULT_MAX_CHARS
from ..runtime.lead_tools import TaskInput
from ..runtime.pages import READ_THREAD_DESCRIPTION, REF_DESCRIPTION
from ._refusals import refusals

if TYPE_CHECKING:
    from ._server import Threadloom

MAX_WAIT_S = 50.0
DEFAULT_WAIT_S = 45.0
MAX_PAGE_CHARS = 20_000
"""A page's text travels twice (the structured content and its text copy): 20,000 characters
of transcript stay near 12,000 tokens, half of Claude Code's cap."""
MAX_OUTPUT_CHARS = 30_000
"""Results beyond this (JSON characters) are left out of one answer, each replaced by a note
saying how to read it; the refs and statuses are always all there."""
MAX_REFS = 100

Seconds = Annotated[float, Field(ge=0, le=MAX_WAIT_S, description="At most 50 s")]
WaitSeconds = Annotated[
    float,
    Field(
        ge=0,
        le=MAX_WAIT_S,
        description="Return after at most this many seconds (max 50); what still runs is"
        " returned as pending refs, to collect with `wait`",
    ),
]
Ref = Annotated[str, Field(description="T-<id> (a unique prefix of 4+ characters is enough)")]
ModelSpec = Annotated[
    str | None,
    Field(
        description="anthropic:MODEL, openai:MODEL@BASE_URL or scripted:PATH; default: the"
        " server's --worker-model / --model"
    ),
]


_LIVE = (str(Status.QUEUED), str(Status.RUNNING))
_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_STARTS_WORK = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)


MAX_ANSWER_CHARS = 50_000
"""No answer's text is longer (about 12,500 tokens; its structured copy travels beside it)."""


def answer(
    data: dict[str, Any], *, text: str | None = None, narrow: str | None = None
) -> CallToolResult:
    """Structured content, and its compact JSON (or ``text``) for clients that read text.
    With ``narrow`` (how to ask for less), an answer too large for one call is refused; the
    answers without it are bounded as they are built (pages, ``bounded``) and never refused —
    a dispatch's refs must reach the caller."""
    shown = text if text is not None else json.dumps(data, ensure_ascii=False)
    if narrow is not None and len(shown) > MAX_ANSWER_CHARS:
        raise ToolError(
            f"the answer is {len(shown):,} characters, more than one call returns"
            f" ({MAX_ANSWER_CHARS:,}): {narrow}"
        )
    return CallToolResult(content=[TextContent(type="text", text=shown)], structured_content=data)


def listing(items: list[Any], *, narrow: str) -> CallToolResult:
    """A SPEC list shape: the text is the list itself; the structured content wraps it as
    ``{"result": [...]}`` (structured content is an object), as the SDK does for lists."""
    return answer({"result": items}, text=json.dumps(items, ensure_ascii=False), narrow=narrow)


def bounded(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep every entry's ref and status; leave out results past ``MAX_OUTPUT_CHARS``."""
    used = 0
    out = []
    for entry in entries:
        size = len(json.dumps(entry, ensure_ascii=False))
        if "result" in entry and used + size > MAX_OUTPUT_CHARS:
            entry = {k: v for k, v in entry.items() if k != "result"}
            entry["result_omitted"] = (
                "too large for one answer: wait on fewer refs, or read_thread(ref)"
            )
            size = len(json.dumps(entry, ensure_ascii=False))
        used += size
        out.append(entry)
    return out


def short_titles(data: Any) -> Any:
    """``data`` with every title longer than ``MAX_TITLE_CHARS`` cut there, and marked with
    where the whole one is read (its thread's resource): one long title (stored before titles
    were capped, imported, or given to the lead's own ``dispatch``) must not make a listing
    too large for one answer."""
    if isinstance(data, list):
        return [short_titles(x) for x in data]
    if not isinstance(data, dict):
        return data
    out = {k: short_titles(v) for k, v in data.items()}
    title, ref = out.get("title"), out.get("ref")
    if isinstance(title, str) and len(title) > MAX_TITLE_CHARS and isinstance(ref, str):
        thread = ref.split("#", 1)[0].removeprefix("T-")
        out["title"] = (
            f"{title[:MAX_TITLE_CHARS]}… [{len(title):,} characters; the whole title:"
            f" threadloom://thread/{thread}]"
        )
    return out


def check_tasks(tasks: list[TaskInput]) -> None:
    ids = [t.id for t in tasks if t.id]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ToolError(f"tasks: duplicate task id {dupes[0]!r}")
    for i, t in enumerate(tasks):
        unknown = [x for x in (t.tools or []) if x not in TOOL_REGISTRY]
        if unknown:
            raise ToolError(
                f"tasks[{i}].tools: unknown tool {unknown[0]!r}; the worker tools are"
                f" {', '.join(sorted(TOOL_REGISTRY))}"
            )


def register_tools(app: Threadloom) -> None:
    server = app.server
    bg = app.background

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
                if entry["status"] not in _LIVE:
                    entry["status"] = str(Status.QUEUED)
            out.append(entry)
        return bounded(out)

    async def client_lead(ctx: Context[Any, Any], workspace: str | None) -> ThreadInfo:
        ws = await app.workspace(ctx, workspace)
        return await bg.lead(app.job_spec(app.client_name(ctx), ws))

    async def one(ref: str, wait_s: float, ctx: Context[Any, Any]) -> dict[str, Any]:
        w = await waited([ref], "all", wait_s, ctx)
        return (await entries(w))[0]

    @server.tool(annotations=_STARTS_WORK)
    async def dispatch(
        tasks: Annotated[list[TaskInput], Field(min_length=1, max_length=MAX_REFS)],
        ctx: Context[Any, Any],
        workspace: Annotated[
            str | None,
            Field(description="Directory the workers work in; default: your first root"),
        ] = None,
        model: ModelSpec = None,
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
    ) -> CallToolResult:
        """Run tasks on fresh-context workers in parallel. Each worker sees only its task's
        prompt (name files, failing tests, constraints, what to report) and ends with a
        distilled result. Workers done within wait_s carry their result; the rest are pending:
        collect them with `wait`."""
        with refusals():
            check_tasks(tasks)
            lead = await client_lead(ctx, workspace)
            raw = [t.model_dump(exclude_none=True) for t in tasks]
            if model:
                raw = [{"model": model, **t} for t in raw]
            workers = await bg.dispatch(lead, raw)
            w = await waited([i.ref for i in workers], "all", wait_s, ctx)
            return answer(
                {
                    "job": lead.ref,
                    "workers": await entries(w),
                    "pending": [i.ref for i in w.pending],
                }
            )

    @server.tool(annotations=_READ_ONLY)
    async def wait(
        refs: Annotated[list[Ref], Field(min_length=1, max_length=MAX_REFS)],
        ctx: Context[Any, Any],
        mode: Literal["all", "any"] = "all",
        timeout_s: Seconds = DEFAULT_WAIT_S,
    ) -> CallToolResult:
        """Wait until all (or any) of these threads have ended, at most timeout_s seconds.
        Returns each ref's status, with its result once it ended; `pending` lists the ones
        still running (call wait again with them)."""
        with refusals():
            w = await waited(refs, mode, timeout_s, ctx)
            return answer({"workers": await entries(w), "pending": [i.ref for i in w.pending]})

    @server.tool(annotations=_STARTS_WORK)
    async def run_job(
        name: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_TITLE_CHARS,
                description=f"The job's name, its lead thread's title. {TITLE_HELP}",
            ),
        ],
        goal: Annotated[str, Field(min_length=1)],
        ctx: Context[Any, Any],
        tasks: Annotated[list[TaskInput], Field(max_length=1000)] | None = None,
        workspace: str | None = None,
        model: ModelSpec = None,
        worker_model: ModelSpec = None,
        max_parallel: Annotated[int, Field(ge=1, le=256)] | None = None,
        isolation: Literal["none", "worktree"] | None = None,
        budget_tokens: Annotated[int, Field(ge=0)] | None = None,
        sandbox: Literal["auto", "required", "none"] | None = None,
        network: bool | None = None,
        worker: WorkerDefaults | None = None,
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
    ) -> CallToolResult:
        """Run a whole job as a job file would ([job] keys and tasks as arguments): a lead
        model plans, dispatches workers, reviews and reports. Returns the job's ref at once if
        it runs past wait_s; collect the report with `wait([job])`."""
        with refusals():
            ws = await app.workspace(ctx, workspace)
            fields: dict[str, Any] = {
                "model": model or app.settings.model,
                "worker_model": worker_model or app.settings.worker_model,
                "max_parallel": max_parallel,
                "isolation": isolation,
                "budget_tokens": budget_tokens,
                "sandbox": sandbox,
                "network": network,
                "worker": worker,
            }
            spec = JobSpec.from_input(  # the job file's rules: unique task ids, short titles
                {
                    "name": name,
                    "goal": goal,
                    "workspace": str(ws),
                    "base_dir": str(app.settings.cwd),
                    "tasks": [t.model_dump(exclude_none=True) for t in tasks or []],
                    **{k: v for k, v in fields.items() if v is not None},
                }
            )
            lead = await bg.start_job(spec)
            entry = await one(lead.ref, wait_s, ctx)
            out = {"job": lead.ref, "lead": lead.ref, "status": entry["status"]}
            if "result" in entry:
                out["report"] = entry["result"]["report"]
            return answer(out)

    @server.tool(
        annotations=_READ_ONLY,
        description=READ_THREAD_DESCRIPTION + " `next` is that ref, or null at the end.",
    )
    async def read_thread(
        ref: Annotated[str, Field(description=REF_DESCRIPTION)],
        mode: Literal["messages", "overview", "tool_outputs", "grep"] = "messages",
        pattern: Annotated[str | None, Field(description="Regular expression (grep)")] = None,
        max_chars: Annotated[int, Field(gt=0, le=MAX_PAGE_CHARS)] = DEFAULT_MAX_CHARS,
    ) -> CallToolResult:
        with refusals():
            page = await app.orch.read(ref, mode=mode, pattern=pattern, max_chars=max_chars)
            return answer({"ref": ref, "text": page.text, "next": page.next_ref}, text=page.text)

    @server.tool(annotations=_READ_ONLY)
    async def search_threads(
        query: Annotated[str, Field(min_length=1, description='Words or "quoted phrases"')],
        job: Annotated[str | None, Field(description="Only this job's threads")] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> CallToolResult:
        """Full-text search over every message of every thread; each hit is a ref with its
        message anchor (T-…#n) and a snippet."""
        with refusals():
            hits = await app.orch.search_json(query, job=job, limit=limit)
            return listing(hits, narrow="lower limit, or name a job")

    @server.tool(annotations=_STARTS_WORK)
    async def ask_thread(
        ref: Ref,
        question: Annotated[str, Field(min_length=1)],
        ctx: Context[Any, Any],
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
    ) -> CallToolResult:
        """A reader with a fresh context reads that thread and answers with citations (T-…#n)
        that are checked to resolve. If it takes longer than wait_s, `wait([reader])`."""
        with refusals():
            lead = await client_lead(ctx, None)
            reader = await bg.ask(lead, ref, question)
            entry = await one(reader.ref, wait_s, ctx)
            if "result" in entry:
                return answer(entry["result"])
            return answer({"answer": None, "citations": [], "reader": reader.ref, **entry})

    @server.tool(annotations=_STARTS_WORK)
    async def resume_thread(
        ref: Ref,
        message: Annotated[str, Field(min_length=1, description="What to do next")],
        ctx: Context[Any, Any],
        model: ModelSpec = None,
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
    ) -> CallToolResult:
        """Continue a thread with its whole history and this message; same ref. Returns its
        new result if it ends within wait_s, else its status (collect it with `wait`)."""
        with refusals():
            await refuse_client_lead(ref)
            info = await bg.resume(ref, message, model=model)
            return answer(await one(info.ref, wait_s, ctx))

    @server.tool(annotations=_STARTS_WORK)
    async def fork_thread(
        ref: Ref,
        message: Annotated[str, Field(min_length=1, description="What the fork does differently")],
        ctx: Context[Any, Any],
        at: Annotated[int | None, Field(ge=1, description="Fork after this message")] = None,
        no_run: bool = False,
        model: ModelSpec = None,
        wait_s: WaitSeconds = DEFAULT_WAIT_S,
    ) -> CallToolResult:
        """A new thread sharing ref's history up to message `at` (default: the end), then this
        message, run on (unless no_run). The original is untouched."""
        with refusals():
            await refuse_client_lead(ref)
            fork = await bg.fork(ref, message, at=at, model=model, run=not no_run)
            entry = await one(fork.ref, 0 if no_run else wait_s, ctx)
            origin = fork.forked_from
            entry["forked_from"] = {"ref": origin.ref, "at": origin.at} if origin else None
            return answer(entry)

    @server.tool(annotations=_READ_ONLY)
    async def list_threads(
        job: Annotated[str | None, Field(description="Only this job's threads")] = None,
        status: Literal["idle", "queued", "running", "done", "failed", "interrupted", "cancelled"]
        | None = None,
        kind: Literal["lead", "worker", "reader"] | None = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 50,
    ) -> CallToolResult:
        """Threads, newest first (as `threadloom ls --json`). A title longer than 200
        characters is cut, with where to read it whole (threadloom://thread/{id})."""
        with refusals():
            rows = await app.orch.list_threads(job=job, status=status, kind=kind, limit=limit)
            return listing(
                short_titles(rows), narrow="lower limit, or filter by job, status or kind"
            )

    @server.tool(annotations=_READ_ONLY)
    async def job_tree(ref: Ref) -> CallToolResult:
        """The job around ref as a tree of spawn and fork edges, with status and tokens."""
        with refusals():
            narrow = "list_threads(job=ref, limit=…) pages through a large job"
            return answer(short_titles(await app.orch.tree(ref)), narrow=narrow)

    @server.tool(annotations=_READ_ONLY)
    async def stats(
        ref: Annotated[str | None, Field(description="A thread or job")] = None,
    ) -> CallToolResult:
        """Tokens and estimated cost per thread and in total (as `threadloom stats --json`)."""
        with refusals():
            stats = short_titles(await app.orch.stats(ref))
            return answer(stats, narrow="ask for one job: stats(ref)")

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
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
