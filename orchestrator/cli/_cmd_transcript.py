"""Transcripts out, and forks: ``export``, ``fork`` (``import`` is ``_cmd_import``)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

import click

from ..errors import CliError
from ._app import Output, command, run_command

if TYPE_CHECKING:
    from store import Message, Store, ThreadInfo

    from ._render import Printer

# ----------------------------------------------------------------- export


def _base_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An http(s) URL with a host and nothing after its path, without its trailing ``/``."""
    if value is None:
        return None
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: {exc}", ctx, param) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(
            f"{value!r}: an http:// or https:// URL with a host (where `threadloom serve`"
            " answers), such as http://127.0.0.1:8765",
            ctx,
            param,
        )
    if parts.query or parts.fragment or any(c.isspace() or c in "<>\"'`" for c in value.strip()):
        raise click.BadParameter(
            f"{value!r}: the viewer's address only (no query, fragment, quote or space)", ctx, param
        )
    return parts.geturl().rstrip("/")


@command("export", short_help="Print a thread's whole transcript (jsonl, Markdown or HTML).")
@click.argument("ref")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "md", "html"]),
    default="jsonl",
    show_default=True,
    help="jsonl: one message a line; md: a readable Markdown document; html: the web page.",
)
@click.option("--redact", is_flag=True, help="Mask API keys and secret-looking values.")
@click.option(
    "--base-url",
    metavar="URL",
    callback=_base_url,
    help="html: where `threadloom serve` shows these threads (http(s)://host:port); refs to"
    " other threads link there. Without it they are plain text.",
)
@click.pass_context
def export(ctx: click.Context, ref: str, fmt: str, redact: bool, base_url: str | None) -> None:
    """Write a thread's whole transcript (a fork's inherited history included) to stdout.

    \b
    jsonl  one {"role", "content": [blocks]} a line, blocks exactly as stored:
           `threadloom import` reads it back into an identical transcript.
    md     title, metadata, result, then every message; tool calls and
           outputs whole in fenced blocks.
    html   the web viewer's page as one self-contained file (stylesheet
           inlined, no script, nothing fetched); needs the web extra. A ref
           to a message in the file links to it (#7); a ref elsewhere links
           to the viewer at --base-url, or is plain text without one.

    A ref with a range (T-…#3-9) exports only those messages. --json wraps the export:
    {ref, format, messages: N, text}.

    The export is the record, secrets included; --redact masks the configured API keys and
    values that look like secrets (a redacted jsonl export still imports).

    Tool outputs too large to keep inline are stored apart; they are exported whole all the
    same, streamed from the store (redacted as one stream, before any escaping) through a
    temporary file, then to stdout (or as the JSON document's text, a piece at a time), so
    memory stays bounded.
    """
    from ._app import get_app

    as_json = get_app(ctx).json
    if fmt == "html":
        from ._cmd_serve import require_web

        require_web("export --format html")
    elif base_url is not None:
        raise CliError("export: --base-url is for --format html (the links of the page)")

    async def go(store: Store) -> Output:
        resolved = await store.resolve(ref)
        info = resolved.thread
        spool = tempfile.TemporaryFile("w+", encoding="utf-8", newline="")  # noqa: SIM115
        # masked where the text is written, before it is escaped (HTML, JSON): a secret
        # holding ``&``, ``<`` or ``"`` is found as it is, and each output stored apart is
        # masked as one stream (``workers.redacted``), never chunk by chunk
        if fmt == "html":
            from ..web import write_thread_html

            n = await write_thread_html(
                store, resolved.ref, spool.write, redact=redact, base_url=base_url
            )
        else:
            msgs = await store.messages(info.id, start=resolved.start or 1, end=resolved.end)
            n = len(msgs)
            if fmt == "md":
                await _write_markdown(store, spool, info, msgs, redact=redact)
            else:
                await _write_jsonl(store, spool, msgs, redact=redact)
        spool.seek(0)
        data = {"ref": info.ref, "format": fmt, "messages": n}

        def text(p: Printer) -> None:
            with spool:
                if as_json:
                    _write_json(p.write, data, spool)
                else:
                    _copy(spool, p.write)

        # the record, byte for byte (masked above, if asked); written here as a stream
        # (``emit`` would hold a JSON document whole in memory)
        return Output(None, text, redact=False, verbatim=True)

    _run_streamed(ctx, go, ref)


def _run_streamed(ctx: click.Context, fn: Callable[[Store], Awaitable[Output]], ref: str) -> None:
    """``run_command`` for a command that writes its ``--json`` document itself (the text
    function of its ``Output``): ``--json`` stays on for errors, off for ``emit``."""
    from ._app import get_app

    app = get_app(ctx)
    as_json = app.json

    async def go(store: Store) -> Output:
        out = await fn(store)
        app.json = False  # nothing failed: the document is the output's text
        return out

    try:
        run_command(ctx, go, create=False, refs=[ref])
    finally:
        app.json = as_json


PIECE = 1 << 20
"""Characters copied from the spool at a time."""


def _copy(src: IO[str], write: Callable[[str], object]) -> None:
    while piece := src.read(PIECE):
        write(piece)


def _write_json(write: Callable[[str], object], data: dict[str, Any], src: IO[str]) -> None:
    """``{**data, "text": <src's text>}`` as ``dumps`` writes it, the text a piece at a time."""
    from ._render import dumps

    doc = dumps({**data, "text": ""})
    cut = doc.rindex('""') + 1  # the text's value is the document's last string
    write(doc[:cut])
    _copy(src, lambda piece: write(dumps(piece)[1:-1]))
    write(doc[cut:] + "\n")


async def _write_jsonl(
    store: Store, out: IO[str], msgs: Sequence[Message], *, redact: bool
) -> None:
    """``dump_transcript(msgs)`` into ``out``, each output stored apart streamed whole;
    ``redact``: every string masked before it is JSON-encoded (a secret holding ``"`` or
    ``\\`` is found as it is), each output stored apart as one stream."""
    from workers import redact_data, redacted

    from ..importers.jsonl import transcript_parts

    for m in msgs:
        if redact:
            m = m.model_copy(
                update={
                    "content": [
                        type(b).model_validate(redact_data(b.model_dump(exclude_none=True)))
                        for b in m.content
                    ]
                }
            )
        for part in transcript_parts(m):
            if isinstance(part, str):
                out.write(part)
                continue
            pieces = store.output_pieces(m.thread_id, m.seq, part.tool_use_id)
            if redact:
                pieces = redacted(pieces)
            async for piece in pieces:
                out.write(json.dumps(piece, ensure_ascii=False)[1:-1])
        out.write("\n")


async def _write_markdown(
    store: Store, out: IO[str], info: ThreadInfo, msgs: Sequence[Message], *, redact: bool
) -> None:
    """The Markdown document into ``out`` (it escapes nothing: masked as one stream, as it is
    written, when ``redact``)."""
    from store import Usage
    from workers import RedactingWriter

    from ._thread_text import WholeOutputs, write_markdown

    totals = await store.usage.totals(thread_id=info.id)
    usage = totals[0].usage if totals else Usage()
    whole = await WholeOutputs.spool(store, msgs)
    sink = RedactingWriter(out.write) if redact else None
    try:
        cost = totals[0].cost_usd if totals else 0.0
        write = out.write if sink is None else sink.write
        write_markdown(write, info, msgs, usage=usage, cost=cost, whole=whole)
        if sink is not None:
            sink.close()
    finally:
        whole.close()


# ----------------------------------------------------------------- fork


_FORK_HELP = "Fork a thread at a message (--no-run: only create it)."


@command("fork", run_options="thread", short_help=_FORK_HELP)
@click.argument("ref", metavar="REF[#N]")
@click.argument("message", required=False)
@click.option("--model", "model", metavar="SPEC", help="Model of the fork (default: REF's).")
@click.option("--no-run", is_flag=True, help="Only create the fork (and append MESSAGE).")
@click.pass_context
def fork(
    ctx: click.Context,
    /,
    ref: str,
    message: str | None,
    model: str | None,
    no_run: bool,
    **knobs: Any,
) -> None:
    """Fork a thread: a new thread sharing REF's history up to message N (default: its end),
    then MESSAGE. REF itself is never changed.

    The fork references the history, it does not copy it. A fork point cannot fall between a
    tool call and its result. With --no-run the fork is only created (status idle), with
    MESSAGE appended if given; --max-output-tokens and --request-timeout are for a fork that
    runs. --json: {ref, forked_from: {ref, at}, status}.
    """
    from store import ThreadInfo, ThreadRef

    parsed = ThreadRef.parse(ref)
    if parsed.has_anchor and (parsed.open_end or parsed.end != parsed.start):
        raise CliError(f"fork point must be one message, T-…#N, not a range: {ref!r}")
    if not no_run:
        from ._cmd_run import run_fork

        run_fork(ctx, ref, message, model, knobs)
        return
    from ..jobs import RUN_OPTIONS

    given = [o.flag for o in RUN_OPTIONS if knobs.get(o.key) is not None]
    if given:
        raise CliError(f"{', '.join(given)}: set for a run, and --no-run runs nothing")

    async def go(store: Store) -> Output:
        from ..api import Orchestrator
        from ..logging import get_logger

        info = await Orchestrator(store).fork(ref, message, model=model, run=False)
        assert isinstance(info, ThreadInfo) and info.forked_from is not None
        src, at = info.forked_from.ref, info.forked_from.at
        get_logger(__name__).info("thread.forked", thread=info.ref, source=src, at=at)
        data = {
            "ref": info.ref,
            "forked_from": {"ref": src, "at": at},
            "status": str(info.status),
            "messages": info.head_seq,
            "title": info.title,
            "model": info.model,
        }
        added = f"; message #{info.head_seq} appended" if message else ""
        return Output(data, f"{info.ref}  fork of {src}#{at} ({info.status}{added})\n")

    run_command(ctx, go, create=False, refs=[ref])
