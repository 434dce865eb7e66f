"""``import``: threadloom transcripts (JSONL), Claude Code sessions and Codex CLI rollouts."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import CliError
from ._app import Output, command, run_command

if TYPE_CHECKING:
    from store import Store

    from ..importers import ImportReport, Session, Written


@command("import", short_help="Import a transcript, or Claude Code / Codex sessions.")
@click.argument("path", metavar="PATH", type=click.Path(dir_okay=True, allow_dash=True))
@click.option(
    "--from",
    "fmt",
    type=click.Choice(["auto", "jsonl", "claude-code", "codex"]),
    default="auto",
    show_default=True,
    help="The format of PATH (auto: told from each file's first lines).",
)
@click.option("--title", "title", metavar="T", help="Thread title (default: from the source).")
@click.pass_context
def import_(ctx: click.Context, path: str, fmt: str, title: str | None) -> None:
    """Create threads from a transcript or from other agents' sessions.

    \b
    jsonl        one message a line, {"role": "user" | "assistant", "content": str |
                 [block, …]} with text, thinking, tool_use and tool_result blocks (what
                 `threadloom export` writes); PATH is one file, or - for stdin
    claude-code  Claude Code sessions: ~/.claude/projects/<project>/<session>.jsonl, each
                 subagent in <session>/subagents/ (PATH: a session file, a project, or
                 ~/.claude/projects)
    codex        Codex CLI rollouts: ~/.codex/sessions/…/rollout-*.jsonl

    A transcript (jsonl) is checked strictly: blank lines are ignored and cache_control
    keys dropped, anything else unknown is refused, the first message is the user's and
    every tool_use is answered by a tool_result in the next message (a tool_use on the last
    line may stay open: resuming the thread answers it). The first bad line is an error
    naming it (exit 2), and nothing is stored. It becomes one worker thread, status idle.

    Sessions become threads: the main conversation a lead thread, each subagent a worker
    thread under the thread that spawned it, each rewound or rolled-back branch and each
    Codex fork a fork by reference. Importing the same sessions again adds only what is new.
    A line that cannot be read is skipped and counted, never fatal. Each thread keeps where it
    came from in `show --json`'s "source". Only regular files below PATH (a file: below its
    session's directory) are read; a symlink out, a FIFO or a device is left out with a
    warning naming it ("refused" in --json).

    --json: {ref, messages, threads: [{ref, kind, parent, source, messages}], skipped}
    (ref and messages: the first main thread).
    """
    from ..importers import Confine, detect, import_sessions, parse_lines, write_sessions

    if path == "-":
        text = _read_text(path, "<stdin>")
        kind = fmt if fmt != "auto" else _detect_text(text)
        if kind in (None, "jsonl"):
            _import_jsonl(ctx, text, "<stdin>", title)
            return
        sessions = parse_lines(text.split("\n"), kind)

        async def from_stdin(store: Store) -> ImportReport:
            report = _report(sessions)
            report.threads = await write_sessions(store, sessions, title=title)
            return report

        _import_sessions(ctx, from_stdin, "<stdin>", one=_FORMATS[kind])
        return
    target = Path(path)
    if target.is_dir():
        if fmt == "jsonl":
            raise CliError(f"{path}: --from jsonl imports one file, not a directory")
        wanted = ("claude-code", "codex") if fmt == "auto" else (fmt,)
        below = Confine(target, [])  # what it refuses is said by the import itself
        if not any(detect(f, within=below) in wanted for f in below.walk(target, ".jsonl")):
            raise CliError(f"{path}: no Claude Code or Codex session files below it")
    else:
        found = detect(target) if target.is_file() else None
        kind = fmt if fmt != "auto" else found
        if kind in (None, "jsonl"):
            _import_jsonl(ctx, _read_text(path, path), path, title)
            return
        if found not in (None, kind):
            raise CliError(
                f"{path}: reads as {_FORMATS[found]}, not {_FORMATS[kind]}: use --from {found}"
                " (or leave --from out)"
            )
        fmt = kind

    async def from_path(store: Store) -> ImportReport:
        return await import_sessions(store, target, fmt=fmt, title=title)

    _import_sessions(ctx, from_path, path, one=None if target.is_dir() else _FORMATS[fmt])


def _detect_text(text: str) -> str | None:
    import json

    from ..importers import detect_objects

    objs = []
    for line in text.split("\n", 50)[:50]:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            objs.append(obj)
    found: str | None = detect_objects(objs)
    return found


def _report(sessions: list[Session]) -> ImportReport:
    from ..importers import ImportReport

    return ImportReport(skipped=sum(s.skipped for s in sessions), files=1)


_FORMATS = {
    "claude-code": "a Claude Code session",
    "codex": "a Codex rollout",
    "jsonl": "a threadloom transcript",
}


def _import_sessions(
    ctx: click.Context,
    run: Callable[[Store], Awaitable[ImportReport]],
    name: str,
    *,
    one: str | None = None,
) -> None:
    """``one``: the one session file (or stdin) being imported, as what: one that gives no
    thread at all (not even one imported before) is an error, not an empty success."""
    from ..logging import get_logger

    async def go(store: Store) -> Output:
        report = await run(store)
        for line in report.refused:
            sys.stderr.write(f"warning: {line}\n")
        if one is not None and not report.threads and not report.unchanged:
            skipped = f"; {report.skipped} lines could not be read" if report.skipped else ""
            raise CliError(f"{name}: no conversation to import as {one}{skipped}")
        written = report.threads
        added = sum(w.added for w in written)
        get_logger(__name__).info(
            "sessions.imported",
            source=name,
            threads=len(written),
            added=added,
            skipped=report.skipped,
            unchanged_files=len(report.unchanged),
        )
        main = next((w for w in written if _is_main(w)), written[0] if written else None)
        data = {
            "ref": main.info.ref if main else None,
            "messages": main.info.head_seq if main else 0,
            "threads": [_thread_json(w) for w in written],
            "skipped": report.skipped,
            "files": report.files,
            "unchanged_files": len(report.unchanged),
            "unrecognized": report.unrecognized,
            "refused": report.refused,
        }
        return Output(data, _text(written, report, name))

    run_command(ctx, go)


def _is_main(w: Written) -> bool:
    from store import Kind

    return w.info.kind == Kind.LEAD and w.info.forked_from is None and "branch" not in w.source


def _thread_json(w: Written) -> dict[str, Any]:
    return {
        "ref": w.info.ref,
        "kind": str(w.info.kind),
        "parent": w.parent,
        "forked_from": None
        if w.info.forked_from is None
        else {"ref": w.info.forked_from.ref, "at": w.info.forked_from.at},
        "source": w.source,
        "title": w.info.title,
        "messages": w.info.head_seq,
        "added": w.added,
        "created": w.created,
    }


def _text(written: list[Written], report: ImportReport, name: str) -> str:
    lines = []
    for w in written:
        if w.info.forked_from is not None:
            how = f"fork of {w.info.forked_from.ref}#{w.info.forked_from.at}"
        elif w.parent is not None:
            how = f"under {w.parent}"
        else:
            how = str(w.info.kind)
        state = "new" if w.created else (f"+{w.added}" if w.added else "unchanged")
        lines.append(
            f"{w.info.ref}  {w.info.head_seq:>6} messages  {state:<9}  {how}  {w.info.title}"
        )
    new = sum(1 for w in written if w.created)
    grown = sum(1 for w in written if w.added and not w.created)
    summary = (
        f"imported {name}: {len(written)} threads ({new} new, {grown} extended,"
        f" {len(written) - new - grown} unchanged), {sum(w.added for w in written)} messages added"
    )
    if report.unchanged:
        summary += f", {len(report.unchanged)} files unchanged since the last import (not read)"
    if report.skipped:
        summary += f", {report.skipped} unreadable lines skipped"
    if report.unrecognized:
        summary += f", {len(report.unrecognized)} files of another format left out"
    if report.refused:
        summary += f", {len(report.refused)} paths refused (see the warnings)"
    return "\n".join([*lines, summary]) + "\n"


# ----------------------------------------------------------------- threadloom transcripts


def _import_jsonl(ctx: click.Context, text: str, name: str, title: str | None) -> None:
    from ..importers.jsonl import parse_transcript
    from ..logging import get_logger

    msgs = parse_transcript(text, source=name)
    if not msgs:
        raise CliError(f"{name}: no messages to import")
    thread_title = title if title is not None else f"imported from {Path(name).name}"

    async def go(store: Store) -> Output:
        from store import Status

        info = await store.create_thread(
            kind="worker", status=Status.IDLE, title=thread_title, messages=msgs
        )
        get_logger(__name__).info("thread.imported", thread=info.ref, messages=len(msgs))
        thread = {"ref": info.ref, "kind": str(info.kind), "parent": None, "source": None}
        return Output(
            {
                "ref": info.ref,
                "messages": info.head_seq,
                "title": info.title,
                "threads": [{**thread, "messages": info.head_seq}],
                "skipped": 0,
            },
            f"{info.ref}  imported {len(msgs)} messages from {name}\n",
        )

    run_command(ctx, go)


def _read_text(file: str, name: str) -> str:
    """A transcript named (or stdin) as text, ``MAX_FILE`` bytes at most: a device or an
    endless pipe is an error, not a hang on memory."""
    from ..importers import MAX_FILE

    try:
        if file == "-":
            data = sys.stdin.buffer.read(MAX_FILE + 1)
        else:
            with open(file, "rb") as f:
                data = f.read(MAX_FILE + 1)
        if len(data) > MAX_FILE:
            raise CliError(f"{name}: over {MAX_FILE} bytes, more than a transcript may have")
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as text mode
    except UnicodeDecodeError as err:
        raise CliError(f"{name}: not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise CliError(f"cannot read {name}: {err.strerror or err}") from None
