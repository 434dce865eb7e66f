"""threadloom's read-only MCP tools: a thread's pages, search, the listings. None starts work,
and each answer is bounded (``_answers``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from mcp.types import CallToolResult
from pydantic import Field

from ..api import DEFAULT_MAX_CHARS, READ_THREAD_DESCRIPTION, REF_DESCRIPTION
from ._answers import MAX_PAGE_CHARS, READ_ONLY, Ref, answer, listing, short_titles, tool
from ._refusals import refusals

if TYPE_CHECKING:
    from ._server import Threadloom

Status = Literal["idle", "queued", "running", "done", "failed", "interrupted", "cancelled"]


def register_reading(app: Threadloom) -> None:
    server = app.server

    @tool(
        server,
        annotations=READ_ONLY,
        description=READ_THREAD_DESCRIPTION + " `next` is that ref, or null at the end.",
    )
    async def read_thread(
        ref: Annotated[str, Field(description=REF_DESCRIPTION)],
        mode: Annotated[
            Literal["messages", "overview", "tool_outputs", "grep"],
            Field(
                description="messages: the messages; overview: one line a message;"
                " tool_outputs: raw tool outputs; grep: lines matching pattern"
            ),
        ] = "messages",
        pattern: Annotated[
            str | None, Field(description="A Python regular expression (mode grep)")
        ] = None,
        max_chars: Annotated[
            int, Field(gt=0, le=MAX_PAGE_CHARS, description="Page size in characters")
        ] = DEFAULT_MAX_CHARS,
    ) -> CallToolResult:
        with refusals():
            page = await app.orch.read(ref, mode=mode, pattern=pattern, max_chars=max_chars)
            return answer({"ref": ref, "text": page.text, "next": page.next_ref}, text=page.text)

    @tool(server, annotations=READ_ONLY)
    async def search_threads(
        query: Annotated[str, Field(min_length=1, description='Words or "quoted phrases"')],
        job: Annotated[str | None, Field(description="Only this job's threads")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Most hits to return")] = 20,
    ) -> CallToolResult:
        """Full-text search over every message of every thread; each hit is a ref with its
        message anchor (T-…#n) and a snippet."""
        with refusals():
            hits = await app.orch.search_json(query, job=job, limit=limit)
            return listing(hits, narrow="lower limit, or name a job")

    @tool(server, annotations=READ_ONLY)
    async def list_threads(
        job: Annotated[str | None, Field(description="Only this job's threads")] = None,
        status: Annotated[Status | None, Field(description="Only threads in this status")] = None,
        kind: Annotated[
            Literal["lead", "worker", "reader"] | None, Field(description="Only this kind")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Most threads to return")] = 50,
        before: Annotated[
            str | None,
            Field(
                description="Only threads older than this one: the ref of the last thread of"
                " a full page gives the next page"
            ),
        ] = None,
    ) -> CallToolResult:
        """Threads, newest first (as `threadloom ls --json`), at most `limit`; a full page
        goes on with `before` = its last ref. A title longer than 200 characters is cut, with
        where to read it whole (threadloom://thread/{id})."""
        with refusals():
            rows = await app.orch.list_threads(
                job=job, status=status, kind=kind, limit=limit, before=before
            )
            return listing(
                short_titles(rows), narrow="lower limit, or filter by job, status or kind"
            )

    @tool(server, annotations=READ_ONLY)
    async def job_tree(ref: Ref) -> CallToolResult:
        """The job around ref as a tree of spawn and fork edges, with status and tokens; a
        job whose lead handed off (its context was full) lists its later leads, in order,
        under `successors`, and each thread names the one it `continues`/is `continued_by`."""
        with refusals():
            narrow = "list_threads(job=ref, limit=…) pages through a large job"
            return answer(short_titles(await app.orch.tree(ref)), narrow=narrow)

    @tool(server, annotations=READ_ONLY)
    async def stats(
        ref: Annotated[str | None, Field(description="A thread or job; default: all")] = None,
    ) -> CallToolResult:
        """Tokens and estimated cost per thread and in total (as `threadloom stats --json`)."""
        with refusals():
            stats = short_titles(await app.orch.stats(ref))
            return answer(stats, narrow="ask for one job: stats(ref)")
