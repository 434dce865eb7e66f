"""Reading threads: ``ls``, ``show``, ``tree``, ``search`` — through ``orchestrator.api`` (the
same shapes as every front door), rendered by ``_read_views``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..views import LS_LIMIT
from ._app import Output, command, get_app, nothing_to_read, run_command
from ._read_views import View, ls_view, on_terminal, search_view, show_view, tree_view

if TYPE_CHECKING:
    from store import Store

    from ..api import Orchestrator
    from ._thread_text import Mode

STATUSES = ("idle", "queued", "running", "done", "failed", "interrupted", "cancelled")
KINDS = ("lead", "worker", "reader")


def _api(store: Store) -> Orchestrator:
    from ..api import Orchestrator

    return Orchestrator(store)


def _output(view: View) -> Output:
    return Output(view.data, view.text, redact=view.redact, verbatim=view.verbatim)


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

    if nothing_to_read(ctx, [], "no threads"):
        return

    async def go(store: Store) -> Output:
        rows = await _api(store).list_threads(
            job=job, status=status, kind=kind, limit=limit + 1 if limit else None
        )
        more = bool(limit) and len(rows) > limit
        shown = rows[:limit] if limit else rows
        short = None
        if on_terminal():
            found = await store.short_refs([t["ref"].removeprefix("T-") for t in shown])
            short = {f"T-{i}": ref for i, ref in found.items()}
        view = ls_view(shown, limit=limit, more=more, database=store.db.display, short=short)
        return _output(view)

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
    --raw prints tool inputs, tool outputs and thinking whole.
    Control, bidi and invisible characters (escape sequences, a lone CR, bidi
    overrides, zero-width and tag characters) are drawn visibly (ESC as ^[) on
    a terminal, --raw included; --raw writes the bytes as stored only when
    stdout is not a terminal (a pipe, a file).

    --json prints {ref, kind, status, title, parent, forked_from: {ref, at} | null,
    continues, continued_by, result, usage, messages: [{seq, role, content}]} with content
    blocks exactly as stored; with --raw a tool output stored apart (over 1 MiB) carries its
    whole text, not its preview. continues, continued_by: the threads before and after a
    handoff (a job larger than one context), refs or null; the text shows them as "chain".

    The transcript is the record: it is shown as stored, secrets included, unless --redact
    masks the configured API keys and values that look like secrets (sk-ant-…, AKIA…, ghp_…,
    private-key blocks).
    """

    async def go(store: Store) -> Output:
        view = await _api(store).thread_view(ref)
        mode: Mode = "raw" if raw else "tools" if tools else "brief"
        # outputs stored apart (too large to keep inline) are printed whole by --raw: spooled
        # now, while the store is open, and streamed when printed
        from ._thread_text import WholeOutputs

        whole = await WholeOutputs.spool(store, view.messages or ()) if raw else None
        as_json = get_app(ctx).json
        return _output(show_view(view, mode=mode, redact=redact, whole=whole, whole_json=as_json))

    run_command(ctx, go, create=False, refs=[ref])


# ----------------------------------------------------------------- tree


@command("tree", short_help="The job around REF as a tree of spawn and fork edges.")
@click.argument("ref")
@click.pass_context
def tree(ctx: click.Context, ref: str) -> None:
    """Show the job around REF as a tree of spawn and fork edges.

    Each node: ref, kind, status, title and tokens used (every usage row of that thread).
    A thread spawned by another hangs under it; a fork hangs under the thread it was forked
    from, marked "⑂ fork of #n". REF's own node is marked "◀".

    A job larger than one context is a chain: a thread whose context filled handed off
    ("↳ continued by T-…") to a successor, marked "↳", which follows it: a worker's among
    its siblings, the job's later leads at the top level, each with the workers it spawned.

    --json: the first lead's node, nested: {ref, kind, status, title, usage, continues,
    continued_by, children: [...], forks: [...]}, with successors: [the later leads' nodes,
    in chain order].
    """

    async def go(store: Store) -> Output:
        return _output(tree_view(await _api(store).tree(ref)))

    run_command(ctx, go, create=False, refs=[ref])


# ----------------------------------------------------------------- search


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
    one a line: T-…#seq, role, and a snippet with its matches styled (piped: marked ⟦so⟧,
    and a ⟦ or ⟧ of the text itself printed as \\u27e6 or \\u27e7). Read one with
    `threadloom show T-…#seq`.

    --json: [{ref: "T-…#seq", thread: "T-…", seq, role, snippet, marks: [[start, end]]}]
    (marks: where each match is in snippet, in characters).
    """
    if not query.split():
        from ..errors import CliError

        raise CliError("search: the query is empty")

    if nothing_to_read(ctx, [], f"no matches for {query!r}"):
        return

    async def go(store: Store) -> Output:
        hits = await _api(store).search(query, job=job, limit=limit)
        return _output(search_view(query, hits))

    run_command(ctx, go)
