"""Reading threads: ``ls``, ``show``, ``tree``, ``search``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

from ._render import Column, Printer, age, compact, one_line, status_cell
from .cli import Output, command, run_command

if TYPE_CHECKING:
    from store import Store, ThreadInfo, Usage

    from ._thread_view import Mode

STATUSES = ("idle", "queued", "running", "done", "failed", "interrupted", "cancelled")
KINDS = ("lead", "worker", "reader")
LS_LIMIT = 50


async def job_of(store: Store, ref: str) -> ThreadInfo:
    """The lead thread of the job around ``ref`` (a job is named by its lead's ref)."""
    info = (await store.resolve(ref)).thread
    return info if info.job_id == info.id else await store.get_thread(info.job_id)


# ----------------------------------------------------------------- ls


@command("ls")
@click.option("--job", "job", metavar="REF", help="Only the job around REF (any of its threads).")
@click.option("--status", type=click.Choice(STATUSES), help="Only threads with this status.")
@click.option("--kind", type=click.Choice(KINDS), help="Only threads of this kind.")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=LS_LIMIT,
    show_default=True,
    help="At most N threads (0: all).",
)
@click.pass_context
def ls(
    ctx: click.Context, job: str | None, status: str | None, kind: str | None, limit: int
) -> None:
    """List threads, newest first.

    Text: one row per thread — ref, kind, status, messages (inherited ones of a fork included),
    age, title. When more threads match than --limit, a note on stderr says so.
    """
    from ._thread_view import thread_json

    async def go(store: Store) -> Output:
        job_id = (await job_of(store, job)).id if job else None
        rows = await store.list_threads(
            job_id=job_id, status=status, kind=kind, limit=limit + 1 if limit else None
        )
        more = bool(limit) and len(rows) > limit
        rows = rows[:limit] if limit else rows

        def text(p: Printer) -> None:
            if not rows:
                click.echo("no threads", err=True)
                return
            p.table(
                [
                    Column("REF"),
                    Column("KIND"),
                    Column("STATUS"),
                    Column("MSGS", "right"),
                    Column("AGE", "right"),
                    Column("TITLE", wrap=True),
                ],
                [
                    [
                        t.ref,
                        str(t.kind),
                        status_cell(str(t.status)),
                        str(t.head_seq),
                        age(t.created_at),
                        one_line(t.title, 200),
                    ]
                    for t in rows
                ],
            )
            if more:
                click.echo(f"(the {limit} newest; --limit 0 lists all)", err=True)

        return Output([thread_json(t) for t in rows], text)

    run_command(ctx, go)


# ----------------------------------------------------------------- show


@command("show", short_help="A thread: status, lineage, result, usage, messages.")
@click.argument("ref")
@click.option("--tools", is_flag=True, help="Show tool inputs and outputs (capped).")
@click.option("--raw", is_flag=True, help="Show tool inputs, outputs and thinking whole.")
@click.option("--redact", is_flag=True, help="Mask API keys and secret-looking values.")
@click.pass_context
def show(ctx: click.Context, ref: str, tools: bool, raw: bool, redact: bool) -> None:
    """Show a thread: status, lineage, result, usage, then its messages.

    REF is a thread (its whole visible history, a fork's inherited messages included and marked
    "(from T-…)") or a range of it: T-…#7, T-…#7-12, T-…#7- (to the end).

    \b
    Each message is headed "#seq role". By default:
      text           printed whole
      thinking       one line: [thinking · N chars]
      tool call      one line: → name(key=value, …), long values shortened
      tool result    one line: ← name · ok|error · N lines · M chars — its first line
    --tools adds, indented, the full value of every shortened tool input and
    every tool output, each capped at 40 lines / 6,000 characters (head and
    tail kept) with a marker giving the omitted size and the ref T-…#n whose
    --raw view has it whole.
    --raw prints tool inputs, tool outputs and thinking whole and verbatim.
    Control characters (escape sequences, a lone CR, bidi overrides) are shown
    visibly (ESC as ^[) except with --raw, which writes the bytes as stored.

    --json prints {ref, kind, status, title, parent, forked_from: {ref, at} | null, result,
    usage, messages: [{seq, role, content}]} with content blocks exactly as stored.

    The transcript is the record: it is shown as stored, secrets included, unless --redact
    masks the configured API keys and values that look like secrets (sk-ant-…, AKIA…, ghp_…,
    private-key blocks).
    """
    from ._thread_view import (
        message_json,
        render_header,
        render_messages,
        render_result,
        result_json,
        thread_json,
        usage_json,
    )

    async def go(store: Store) -> Output:
        resolved = await store.resolve(ref)
        info = resolved.thread
        msgs = await store.messages(info.id, start=resolved.start or 1, end=resolved.end)
        start = resolved.start or 1
        before = await store.message(info.id, start - 1) if start > 1 else None
        totals = await store.usage_totals(thread_id=info.id)
        from store import Usage

        usage = totals[0].usage if totals else Usage()
        cost = totals[0].cost_usd if totals else 0.0
        shown = None if resolved.start is None else (resolved.start, resolved.end or info.head_seq)
        data: dict[str, Any] = {
            **thread_json(info),
            "result": result_json(info.result),
            "usage": usage_json(usage),
            "cost_usd": cost,
            "range": None if shown is None else {"start": shown[0], "end": shown[1]},
            "task": info.task,
            "error": info.error,
            "messages": [message_json(m, info.id) for m in msgs],
        }

        def text(p: Printer) -> None:
            render_header(p, info, shown=shown, usage=usage, cost=cost)
            if info.result is not None:
                render_result(p, info.result)
            mode: Mode = "raw" if raw else "tools" if tools else "brief"
            render_messages(p, info, msgs, mode, before=before)

        return Output(data, text, redact=redact, verbatim=raw)

    run_command(ctx, go)


# ----------------------------------------------------------------- tree


@command("tree", short_help="The job around REF as a tree of spawn and fork edges.")
@click.argument("ref")
@click.pass_context
def tree(ctx: click.Context, ref: str) -> None:
    """Show the job around REF as a tree of spawn and fork edges.

    Each node: ref, kind, status, title and tokens used (every usage row of that thread).
    A thread spawned by another hangs under it; a fork hangs under the thread it was forked
    from, marked "⑂ fork of #n". REF's own node is marked "◀".

    --json: the lead's node, nested: {ref, kind, status, title, usage, children: [...],
    forks: [...]}.
    """
    from ._thread_view import fork_json, usage_json

    async def go(store: Store) -> Output:
        focus = (await store.resolve(ref)).thread
        threads = await store.job_tree(focus.job_id)
        from store import Usage

        totals = {t.thread_id: t for t in await store.usage_totals(job_id=focus.job_id)}
        by_id = {t.id: t for t in threads}
        children: dict[str, list[str]] = {t.id: [] for t in threads}
        forks: dict[str, list[str]] = {t.id: [] for t in threads}
        root = by_id.get(focus.job_id, threads[0] if threads else focus)
        for t in threads:
            if t.id == root.id:
                continue
            if t.forked_from and t.forked_from.thread_id in by_id:
                forks[t.forked_from.thread_id].append(t.id)
            elif t.parent_id and t.parent_id in by_id:
                children[t.parent_id].append(t.id)
            else:
                children[root.id].append(t.id)

        def usage_of(tid: str) -> Usage:
            return totals[tid].usage if tid in totals else Usage()

        def node(tid: str) -> dict[str, Any]:
            t = by_id[tid]
            return {
                "ref": t.ref,
                "kind": str(t.kind),
                "status": str(t.status),
                "title": t.title,
                "usage": usage_json(usage_of(tid)),
                "tokens": usage_of(tid).total_tokens,
                "cost_usd": totals[tid].cost_usd if tid in totals else 0.0,
                "parent": None if t.parent_id is None else f"T-{t.parent_id}",
                "forked_from": fork_json(t),
                "children": [node(c) for c in children[tid]],
                "forks": [node(f) for f in forks[tid]],
            }

        data = node(root.id)
        data["focus"] = focus.ref

        def text(p: Printer) -> None:
            def walk(tid: str, prefix: str, connector: str, fork: bool) -> None:
                t = by_id[tid]
                parts: list[tuple[str, str | None]] = [(prefix + connector, "dim")]
                if fork and t.forked_from:
                    parts.append((f"⑂ fork of #{t.forked_from.at}  ", "magenta"))
                parts += [
                    (t.ref, "bold"),
                    (f"  {t.kind}  ", None),
                    status_cell(str(t.status)),
                    (f"  {one_line(t.title, 60)}" if t.title else "", None),
                    (f"  · {compact(usage_of(tid).total_tokens)} tok", "dim"),
                ]
                if tid == focus.id and tid != root.id:
                    parts.append(("  ◀", "yellow"))
                p.parts(parts)
                kids = [(c, False) for c in children[tid]] + [(f, True) for f in forks[tid]]
                below = prefix + ("" if not connector else "│  " if connector == "├─ " else "   ")
                for i, (kid, is_fork) in enumerate(kids):
                    walk(kid, below, "└─ " if i == len(kids) - 1 else "├─ ", is_fork)

            walk(root.id, "", "", False)

        return Output(data, text)

    run_command(ctx, go)


# ----------------------------------------------------------------- search

_MATCH = re.compile(r"\[([^\[\]]*)\]")
SNIPPET_WIDTH = 160


@command("search")
@click.argument("query")
@click.option("--job", "job", metavar="REF", help="Only the job around REF.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="At most N hits."
)
@click.pass_context
def search(ctx: click.Context, query: str, job: str | None, limit: int) -> None:
    """Full-text search over every message of every thread.

    Every word (or "quoted phrase") must occur; punctuation is literal. Hits come best first,
    one a line: T-…#seq, role, and a snippet with the matches in [brackets]. Read one with
    `threadloom show T-…#seq`.

    --json: [{ref: "T-…#seq", thread: "T-…", seq, role, snippet}].
    """
    if not query.split():
        from ._errors import CliError

        raise CliError("search: the query is empty")

    async def go(store: Store) -> Output:
        job_id = (await job_of(store, job)).id if job else None
        hits = await store.search(query, job_id=job_id, limit=limit)
        data = [
            {
                "ref": h.ref,
                "thread": f"T-{h.thread_id}",
                "seq": h.seq,
                "role": h.role,
                "snippet": h.snippet,
            }
            for h in hits
        ]

        def text(p: Printer) -> None:
            if not hits:
                click.echo(f"no matches for {query!r}", err=True)
            width = max((len(h.ref) for h in hits), default=0)
            for h in hits:
                parts: list[tuple[str, str | None]] = [
                    (h.ref.ljust(width), "bold"),
                    (f"  {h.role:<9}  ", "dim"),
                ]
                snippet, pos = one_line(h.snippet, SNIPPET_WIDTH), 0
                for m in _MATCH.finditer(snippet):
                    parts.append((snippet[pos : m.start()], None))
                    parts.append((m.group(0) if not p.styled else m.group(1), "bold yellow"))
                    pos = m.end()
                parts.append((snippet[pos:], None))
                p.parts(parts)

        return Output(data, text)

    run_command(ctx, go)
