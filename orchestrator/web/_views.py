"""What the pages show, read from the store and shaped for the templates: no HTML here (the
templates write it, escaping everything), no Starlette (the HTML export uses these too).

A thread page shows one seq range (``PAGE`` messages) so a thread of 100,000 messages costs
what one of ``PAGE`` does; ``/t/T-…#n`` for an n past the first page is reached by
``message_url``'s ``?from=`` (and, for a bare ``#n``, by the page's script).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from workers import redacted

from ..humanize import count
from ._text import cap

if TYPE_CHECKING:
    from orchestrator.api import Orchestrator
    from orchestrator.views import ThreadView
    from store import Message, Store, ThreadInfo, ToolResultBlock, Usage

PAGE = 200
"""Messages on one thread page."""

TEXT_CAP_CHARS = 32_000
TEXT_CAP_LINES = 800
"""A text or thinking block longer than this is capped on a server page (head and tail, the
whole block linked): a 12 MB message no longer makes a 12 MB page."""

LIST_LIMIT = 200
SEARCH_LIMIT = 50
ARG_WIDTH = 60


def page_start(seq: int) -> int:
    """The first seq of the page that holds message ``seq``."""
    return (max(seq, 1) - 1) // PAGE * PAGE + 1


def thread_url(ref: str) -> str:
    return f"/t/{ref}"


def message_url(ref: str, seq: int) -> str:
    """Where message ``seq`` of thread ``ref`` is: its page, anchored at its seq."""
    start = page_start(seq)
    return f"/t/{ref}#{seq}" if start == 1 else f"/t/{ref}?from={start}#{seq}"


@dataclass(frozen=True, slots=True)
class Links:
    """Where a ref leads from a page: the one maker of every link to a thread, a message or a
    job, for the server's pages and the HTML export alike.

    A message on the page itself (``here``: the shown thread and the ancestors whose messages
    it shares, each with the last seq it shares; ``first``–``last``: the range on the page)
    is its anchor, ``#7``, which works in a file as on the server. Anything else is a page of
    the viewer at ``base`` ("" on the server: its own paths; an export's ``--base-url``), or,
    in an export without one, no link at all (None: the template prints the ref as text), never
    a ``/t/…`` path that leads nowhere from a file."""

    base: str | None = ""
    here: tuple[tuple[str, int], ...] = ()
    first: int = 1
    last: int = 0

    def thread(self, ref: str) -> str | None:
        return None if self.base is None else self.base + thread_url(ref)

    def job(self, ref: str) -> str | None:
        return None if self.base is None else f"{self.base}/job/{ref}"

    def message(self, ref: str, seq: int, *, local: bool = True) -> str | None:
        """Message ``seq`` of ``ref``; ``local`` False: on its own thread's page even when
        the same message is on this one (where an inherited message came from)."""
        from store import ThreadRef

        if local and self.first <= seq <= self.last:
            try:
                named = ThreadRef.parse(ref)
            except Exception:  # not a ref: nothing on this page
                named = None
            if named is not None and any(named.matches(i) and seq <= n for i, n in self.here):
                return f"#{seq}"
        return None if self.base is None else self.base + message_url(ref, seq)

    def ref(self, text: str) -> str | None:
        """Where a ref written in a result or a message leads (``T-…``, ``T-…#7``,
        ``T-…#7-9``: its first message); None when ``text`` is not a ref."""
        from store import ThreadRef

        try:
            parsed = ThreadRef.parse(text)
        except Exception:  # a result's evidence is free text the worker wrote: not always a ref
            return None
        ref = str(parsed.thread)  # ``T-…x2p4`` stays a ref by its end, which the page resolves
        return self.message(ref, parsed.start) if parsed.start else self.thread(ref)


SERVER = Links()
"""The server's links from a page that shows no thread (the list, a job tree, a search)."""


def ref_url(text: str) -> str | None:
    """The server's page of a ref written in a result; None when ``text`` is not a ref."""
    return SERVER.ref(text)


# ----------------------------------------------------------------- messages


@dataclass(slots=True)
class Block:
    """One content block as shown. ``body``/``tail``: the text (capped: head and tail, the
    middle left out and linked as ``whole``); ``pieces``: the whole output streamed instead
    (the HTML export, which has no server to link to)."""

    type: Literal["text", "thinking", "call", "result"]
    body: str = ""
    tail: str = ""
    summary: str = ""
    first: str = ""
    size: str = ""
    total: int = 0
    error: bool = False
    whole: str | None = None
    pieces: AsyncIterator[str] | None = None
    spawned: Sequence[ThreadInfo] = ()
    """The threads a call spawned (a ``dispatch``'s workers, an imported ``Task``'s subagent)."""
    markdown: bool = False
    """A text to render as Markdown (an assistant's)."""

    @property
    def omitted(self) -> int:
        """Characters left out of the page (linked as ``whole``)."""
        return (
            0 if self.pieces is not None else max(self.total - len(self.body) - len(self.tail), 0)
        )


@dataclass(slots=True)
class MessageView:
    seq: int
    role: str
    origin: str | None
    """The ref of the thread that owns the row when the message is inherited (a fork's)."""
    created_at: Any
    blocks: list[Block] = field(default_factory=list)


WholeLink = Callable[[int, str, str], str]
"""(seq, tool_use_id, "input" | "output") → the URL of the whole text; (seq, the block's index
in the message, "text") → the URL of a whole text or thinking block."""


def whole_url(ref: str, seq: int, tool_use_id: str, what: str) -> str:
    """The URL of the whole input or output of tool call ``tool_use_id`` in message ``seq``.

    A tool-use id is any string an import or a model server chose (``a/../b``, ``q?x=1#f``,
    ``..``), so it travels percent-encoded in the query, where no character of it can end the
    path, start a fragment or be taken for a dot segment a browser would resolve away."""
    return f"/t/{ref}/{what}/{seq}?id={quote(tool_use_id, safe='', errors='surrogatepass')}"


def server_links(ref: str) -> WholeLink:
    return lambda seq, tool_use_id, what: whole_url(ref, seq, tool_use_id, what)


def message_views(
    info: ThreadInfo,
    msgs: Sequence[Message],
    *,
    before: Message | None = None,
    whole: WholeLink | None = None,
    store: Store | None = None,
    redact: bool = False,
    spawned: Mapping[str, Sequence[ThreadInfo]] | None = None,
) -> list[MessageView]:
    """The messages as shown. ``before``: the message preceding the range (it names the tools
    whose results open it). ``whole``: links to whole inputs and outputs (the server); without
    one (the export), inputs and inline outputs are shown whole and the outputs stored apart
    are streamed from ``store`` — ``redact``: masked as one stream (``workers.redacted``), before
    the page escapes them. ``spawned``: tool-use id → the threads that call spawned."""
    names: dict[str, str] = {}
    if before is not None:
        names.update((b.id, b.name) for b in before.content if b.type == "tool_use")
    out = []
    for m in msgs:
        view = MessageView(
            seq=m.seq,
            role=m.role,
            origin=None if m.thread_id == info.id else f"T-{m.thread_id}",
            created_at=m.created_at,
        )
        for i, b in enumerate(m.content):
            if b.type == "text":
                view.blocks.append(
                    _prose("text", m.seq, i, b.text, whole, markdown=m.role == "assistant")
                )
            elif b.type == "thinking":
                view.blocks.append(_prose("thinking", m.seq, i, b.thinking, whole))
            elif b.type == "tool_use":
                names[b.id] = b.name
                block = _call(m.seq, b.id, b.name, b.input, whole)
                block.spawned = (spawned or {}).get(b.id, ())
                view.blocks.append(block)
            else:
                name = names.get(b.tool_use_id, b.tool_use_id)
                view.blocks.append(_result(m, b, name, whole, store, redact=redact))
        out.append(view)
    return out


def _prose(
    kind: Literal["text", "thinking"],
    seq: int,
    index: int,
    text: str,
    whole: WholeLink | None,
    *,
    markdown: bool = False,
) -> Block:
    """A text or thinking block: on a server page capped like a tool output (head and tail of
    ``TEXT_CAP_CHARS`` / ``TEXT_CAP_LINES``, the whole block linked), whole in the export;
    ``markdown``: drawn as Markdown (an assistant's text)."""
    head, tail = (
        cap(text, max_lines=TEXT_CAP_LINES, max_chars=TEXT_CAP_CHARS)
        if whole is not None
        else (text, "")
    )
    return Block(
        kind,
        body=head,
        tail=tail,
        size=f"{count(len(text))} chars",
        total=len(text),
        whole=whole(seq, str(index), "text") if tail and whole is not None else None,
        markdown=markdown,
    )


def _call(
    seq: int, tool_use_id: str, name: str, args: dict[str, Any], whole: WholeLink | None
) -> Block:
    text = json.dumps(args, ensure_ascii=False, indent=2)
    head, tail = cap(text) if whole is not None else (text, "")
    return Block(
        "call",
        body=head,
        tail=tail,
        summary=f"{name}({call_args(args)})",
        size=f"{count(len(text))} chars",
        total=len(text),
        whole=whole(seq, tool_use_id, "input") if tail and whole is not None else None,
    )


def call_args(args: dict[str, Any]) -> str:
    """``key=value, …`` with each value shortened: the one line of a collapsed tool call."""
    parts = []
    for key, value in args.items():
        text = json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={text if len(text) <= ARG_WIDTH else text[: ARG_WIDTH - 1] + '…'}")
    line = ", ".join(parts)
    return line if len(line) <= 3 * ARG_WIDTH else line[: 3 * ARG_WIDTH - 1] + "…"


def _result(
    m: Message,
    b: ToolResultBlock,
    name: str,
    whole: WholeLink | None,
    store: Store | None,
    *,
    redact: bool = False,
) -> Block:
    text = b.text
    first = next((line for line in text.splitlines() if line.strip()), "")
    lines = text.count("\n") + (0 if not text or text.endswith("\n") else 1)
    size = f"{count(lines)} lines · {count(len(text))} chars"
    if b.stored is not None:
        size = f"{count(b.stored.chars)} chars, stored apart"
    block = Block(
        "result",
        summary=f"{name} · {'error' if b.is_error else 'ok'}",
        size=size,
        error=b.is_error,
        first=first[:100],
        total=b.stored.chars if b.stored is not None else len(text),
    )
    if whole is None:  # the export: everything whole
        block.body = text
        if b.stored is not None and store is not None:
            pieces = store.output_pieces(m.thread_id, m.seq, b.tool_use_id)
            block.pieces = redacted(pieces) if redact else pieces
        return block
    block.body, block.tail = cap(text)
    if block.tail or b.stored is not None:
        block.whole = whole(m.seq, b.tool_use_id, "output")
    return block


# ----------------------------------------------------------------- a thread page


@dataclass(slots=True)
class ThreadPage:
    info: ThreadInfo
    messages: list[MessageView]
    first: int
    last: int
    usage: Usage
    cost: float
    job: ThreadInfo | None
    parent: ThreadInfo | None
    children: list[ThreadInfo]
    forks: list[ThreadInfo]
    links: Links = SERVER

    @property
    def source(self) -> dict[str, Any] | None:
        """Where an imported thread came from (``format``, ``session_id``, ``path`` …)."""
        from orchestrator.views import source_json

        return source_json(self.info.task)

    @property
    def live(self) -> bool:
        """The page follows new messages: the thread may still grow and this is its tail."""
        return str(self.info.status) in ("running", "queued") and self.last >= self.info.head_seq

    @property
    def prev_from(self) -> int | None:
        return max(self.first - PAGE, 1) if self.first > 1 else None

    @property
    def next_from(self) -> int | None:
        return self.last + 1 if self.last < self.info.head_seq else None


async def thread_page(orch: Orchestrator, ref: str, *, start: int = 1) -> ThreadPage:
    """The page of thread ``ref`` that starts at message ``start`` (``PAGE`` messages), with
    lineage and usage — through the API's ``thread_view`` (what ``show`` is made of)."""
    info = (await orch.store.resolve(ref)).thread
    first = min(max(start, 1), max(info.head_seq, 1))
    last = min(first + PAGE - 1, info.head_seq)
    ranged = f"{info.ref}#{first}-{last}" if info.head_seq else info.ref
    return await _page(orch, await orch.thread_view(ranged), base="")


async def export_page(
    orch: Orchestrator, ref: str, *, redact: bool = False, base_url: str | None = None
) -> ThreadPage:
    """Every message of thread ``ref`` (or of the range it names) on one page, whole;
    ``redact``: the outputs stored apart are streamed masked; refs elsewhere link to the
    viewer at ``base_url``, or are text without one."""
    return await _page(orch, await orch.thread_view(ref), base=base_url, redact=redact)


async def _page(
    orch: Orchestrator, view: ThreadView, *, base: str | None, redact: bool = False
) -> ThreadPage:
    """``base``: "" for the server's page, an export's base URL (or None)."""
    export = base != ""
    info = view.info
    msgs = view.messages or []
    store = orch.store
    children = await store.children(info.id)
    shown = message_views(
        info,
        msgs,
        before=view.before,
        whole=None if export else server_links(info.ref),
        store=store,
        redact=redact,
        spawned=await _spawned(store, info, children),
    )
    first, last = (msgs[0].seq, msgs[-1].seq) if msgs else (1, 0)
    # the lineage beyond show's (job, parent, children and forks as links)
    return ThreadPage(
        info=info,
        messages=shown,
        first=first,
        last=last,
        usage=view.usage,
        cost=view.cost,
        job=None if info.job_id == info.id else await store.get_thread(info.job_id),
        parent=await store.get_thread(info.parent_id) if info.parent_id else None,
        children=children,
        forks=await store.forks(info.id),
        links=Links(base, await _lineage(store, info), first, last),
    )


async def _spawned(
    store: Store, info: ThreadInfo, children: Sequence[ThreadInfo]
) -> dict[str, list[ThreadInfo]]:
    """tool-use id → the children that call spawned: a lead's dispatch rows, and an imported
    subagent's ``source.tool_use_id`` (the ``Task`` call that ran it)."""
    out: dict[str, list[ThreadInfo]] = {}
    if not children:
        return out
    by_id = {c.id: c for c in children}
    if str(info.kind) == "lead":
        for d in await store.dispatches.of_lead(info.id):
            if d.worker_id in by_id:
                out.setdefault(d.tool_use_id, []).append(by_id[d.worker_id])
    for c in children:
        call = ((c.task or {}).get("source") or {}).get("tool_use_id")
        if isinstance(call, str) and c not in out.get(call, ()):
            out.setdefault(call, []).append(c)
    return out


async def _lineage(store: Store, info: ThreadInfo) -> tuple[tuple[str, int], ...]:
    """The thread and each ancestor whose messages it shares, with the last seq it shares
    (``T-parent#3`` is ``T-fork#3`` up to the fork point)."""
    out = [(info.id, info.head_seq)]
    origin = info.forked_from
    while origin is not None:
        out.append((origin.thread_id, min(origin.at, out[-1][1])))
        origin = (await store.get_thread(origin.thread_id)).forked_from
    return tuple(out)


def usage_line(usage: Usage, cost: float) -> str:
    """The usage row of a thread's header (as ``show`` words it)."""
    from orchestrator.views import cache_share

    if usage.total_tokens == 0:
        return "none recorded"
    share = cache_share(usage)
    cached = "—" if share is None else f"{share:.0%}"
    return (
        f"in {count(usage.input_tokens)} · out {count(usage.output_tokens)}"
        f" · cache read {count(usage.cache_read_input_tokens)}"
        f" · cache write {count(usage.cache_creation_input_tokens)}"
        f" · {cached} of input cached · ~${cost:.4f}"
    )
