"""Importing other agents' sessions (SPEC §Importing other agents' sessions).

``import_sessions(store, path, fmt=…)`` reads Claude Code sessions or Codex CLI rollouts — one
file, or every session file below a directory — into threads: the main conversation a ``lead``
thread, each subagent a ``worker`` thread under the thread that spawned it, each abandoned branch
(a rewind, an edit, rolled-back turns) and each Codex fork a fork by reference. Importing again
adds only what is new (``_writer``). ``detect`` tells a file's format from its first lines; a
threadloom transcript (``jsonl``) is the CLI's own strict import and is not read here.

The parsers (``claude_code``, ``codex``) turn a file into ``Session`` values; ``_writer`` puts
those in the store. A line that cannot be read is skipped and counted, never fatal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from store import Store

from . import claude_code, codex
from ._draft import COMPACTION_MARK, NO_RESULT, Branch, Session, paused_collector
from ._lines import head_objects, stat_of
from ._writer import Writer, Written

FORMATS = ("auto", "jsonl", "claude-code", "codex")
_PARSERS = {claude_code.FORMAT: claude_code, codex.FORMAT: codex}


@dataclass
class ImportReport:
    """What an import did: every thread it touched (new or extended or already complete), the
    lines it skipped, and the files below a directory that were neither format."""

    threads: list[Written] = field(default_factory=list)
    skipped: int = 0
    files: int = 0
    unrecognized: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def detect(path: Path) -> str | None:
    """``claude-code``, ``codex`` or ``jsonl`` (a threadloom transcript) from a file's first
    JSON lines; None when none fits."""
    return detect_objects(head_objects(path))


def detect_objects(objs: Iterable[dict[str, object]]) -> str | None:
    for obj in objs:
        if codex.looks_like(obj):
            return codex.FORMAT
        if claude_code.looks_like(obj):
            return claude_code.FORMAT
        if "role" in obj and "content" in obj:
            return "jsonl"
    return None


def parse(
    path: Path,
    fmt: str = "auto",
    *,
    known: Mapping[str, list[int]] | None = None,
    named: Mapping[str, str | None] | None = None,
) -> tuple[list[Session], ImportReport]:
    """The sessions of ``path`` (a file, or the session files below a directory) and a report
    of what was skipped. ``fmt`` is ``claude-code``, ``codex`` or ``auto``. ``known`` maps a
    file's path to the [size, mtime_ns] it had when it was imported whole: such a file that has
    not changed since (nor any subagent file of its session) is not read again, and is listed
    in ``report.unchanged`` (unless a changed session needs it to link across files, or
    ``named`` — path → the Codex thread name it was imported with — differs from the name
    Codex's index gives it now: a rename)."""
    report = ImportReport()
    sessions: list[Session] = []
    held: list[tuple[Path, str]] = []
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        listed = {p for p in files if p.parent.name != "subagents"}
        for f in files:
            if f.parent.name == "subagents" and f.parent.parent.with_suffix(".jsonl") in listed:
                continue  # read with its session
            kind = detect(f)
            if kind not in _PARSERS or (fmt != "auto" and kind != fmt):
                if f.name != codex.INDEX:
                    report.unrecognized.append(str(f))
                continue
            if known is not None and all(_same(x, known) for x in _files_of(f)):
                held.append((f, kind))
                continue
            sessions += _PARSERS[kind].parse_file(f)
            report.files += 1
    else:
        kind = detect(path) if fmt == "auto" else fmt
        if kind not in _PARSERS:
            report.unrecognized.append(str(path))
        elif known is not None and all(_same(x, known) for x in _files_of(path)):
            held.append((path, kind))
        else:
            sessions += _PARSERS[kind].parse_file(path)
            report.files += 1
    root = path if path.is_dir() else path.parent
    if held and named is not None and any(kind == codex.FORMAT for _, kind in held):
        names = codex.index_names(root)
        renamed = [
            (f, kind)
            for f, kind in held
            if kind == codex.FORMAT
            and (name := names.get(codex.session_id(f))) is not None
            and name != named.get(str(f))
        ]
        for f, kind in renamed:
            sessions += _PARSERS[kind].parse_file(f)
            report.files += 1
        held = [h for h in held if h not in renamed]
    if claude_code.link(sessions) and held:  # a changed session goes on from an unchanged one
        for f, kind in held:
            sessions += _PARSERS[kind].parse_file(f)
        held = []
        claude_code.link(sessions)
    codex.name_sessions(sessions, root)
    report.unchanged = [str(x) for f, _ in held for x in _files_of(f)]
    report.skipped = sum(s.skipped for s in sessions)
    return sessions, report


def _files_of(f: Path) -> list[Path]:
    """A session file and the subagent files read with it."""
    subs = f.with_suffix("") / "subagents"
    return [f, *sorted(subs.glob("*.jsonl"))] if subs.is_dir() else [f]


def _same(f: Path, known: Mapping[str, list[int]]) -> bool:
    stat = stat_of(f)
    return stat is not None and known.get(str(f)) == stat


def parse_lines(lines: Iterable[str], fmt: str, *, name: str = "<stdin>") -> list[Session]:
    """The session of JSON lines read from elsewhere (stdin): no subagent or output files."""
    parsed: list[Session] = _PARSERS[fmt].parse_file(Path(name), list(lines))
    return parsed


async def import_sessions(
    store: Store, path: Path, *, fmt: str = "auto", title: str | None = None
) -> ImportReport:
    """Parse ``path`` and write its sessions (see the module docstring): files imported whole
    before and unchanged since are not read again; their threads are reported unchanged.
    One import at a time per database (``Store.exclusive``): what is stored is read, and what
    is missing created, with no other import in between — two at once make each thread once."""
    async with store.exclusive("import"):
        with paused_collector():
            writer = Writer(store, title=title)
            # a title given is applied to what is stored too: every file is read then
            known = await writer.unchanged_files() if title is None else None
            named = await writer.names()
            sessions, report = parse(path, fmt, known=known, named=named)
            report.threads = await writer.write([s for s in sessions if s.branches])
            report.threads += await writer.threads_of(report.unchanged)
            return report


async def write_sessions(
    store: Store, sessions: Iterable[Session], *, title: str | None = None
) -> list[Written]:
    async with store.exclusive("import"):
        with paused_collector():
            return await Writer(store, title=title).write([s for s in sessions if s.branches])


__all__ = [
    "COMPACTION_MARK",
    "FORMATS",
    "NO_RESULT",
    "Branch",
    "ImportReport",
    "Session",
    "Written",
    "detect",
    "detect_objects",
    "import_sessions",
    "parse",
    "parse_lines",
    "write_sessions",
]
