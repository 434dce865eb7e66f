"""What the MCP tools share: how each is registered (a clean description), the argument types
they have in common, and what every one answers with — structured content and its text,
bounded.

Every answer stays well under the 25,000 tokens Claude Code accepts from one tool call: pages
are bounded as they are built, results past ``MAX_OUTPUT_CHARS`` are left out with a note saying
how to read them, and a listing too large for one answer is refused with how to ask for less.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from store import Status

from ..jobs import MAX_TITLE_CHARS

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

F = TypeVar("F", bound=Callable[..., Any])

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
MODEL_FORMS = (
    "anthropic:MODEL, or openai:MODEL@BASE_URL at an endpoint the server allows (its --model,"
    " --worker-model or --allow-endpoint); scripted:PATH only as the server allows"
)
"""The model specs a client may name (``model_policy``), said in each model argument."""

LIVE = (str(Status.QUEUED), str(Status.RUNNING))
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
STARTS_WORK = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)


def tool(server: MCPServer[Any], **options: Any) -> Callable[[F], F]:
    """``server.tool`` with the function's docstring as its description, cleaned
    (``inspect.cleandoc``: no indentation) and joined into one paragraph: what a client's model
    reads, not source code. A ``description`` given is used instead (one text shared with the
    lead's tool of the same name)."""
    given = options.pop("description", None)

    def register(fn: F) -> F:
        description = given or " ".join(inspect.cleandoc(fn.__doc__ or "").split())
        server.tool(description=description, **options)(fn)
        return fn

    return register


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
