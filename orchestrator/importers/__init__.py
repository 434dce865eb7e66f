"""Importing other agents' sessions (SPEC §Importing other agents' sessions).

``import_sessions(store, path, fmt=…)`` reads Claude Code sessions or Codex CLI rollouts — one
file, or every session file below a directory — into threads: the main conversation a ``lead``
thread, each subagent a ``worker`` thread under the thread that spawned it, each abandoned branch
(a rewind, an edit, rolled-back turns) and each Codex fork a fork by reference. Importing again
adds only what is new (``_writer``). ``detect`` tells a file's format from its first lines; a
threadloom transcript is the CLI's own strict format, read and written by ``jsonl``.

The parsers (``claude_code``, ``codex``) turn a file into ``Session`` values; ``_writer`` puts
those in the store, a file's sessions at a time (``batches``), so an import's memory goes with
its largest file, not with the directory. Every read goes through ``_lines.Confine``: nothing
outside the directory named, regular files only, bounded. A line that cannot be read is
skipped and counted, never fatal.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store import Store

from . import claude_code, codex
from ._draft import COMPACTION_MARK, NO_RESULT, Branch, Session, paused_collector
from ._lines import MAX_FILE, Confine, confine, confined, head_objects, stat_of
from ._writer import Writer, Written, ordered

FORMATS = ("auto", "jsonl", "claude-code", "codex")
_PARSERS = {claude_code.FORMAT: claude_code, codex.FORMAT: codex}


@dataclass
class ImportReport:
    """What an import did: every thread it touched (new or extended or already complete), the
    lines it skipped, the files below a directory that were neither format, and the paths it
    refused to read (``refused``: one line each, ``PATH: why``)."""

    threads: list[Written] = field(default_factory=list)
    skipped: int = 0
    files: int = 0
    unrecognized: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def root_of(path: Path) -> Path:
    """The directory an import of ``path`` reads below (``_lines.Confine``): the directory
    named, or for one file the directory its session lives in (a subagent file's session
    directory; a symlink named is resolved first, as the user chose it)."""
    if path.is_dir():
        return path
    real = Path(os.path.realpath(path))
    return real.parent.parent if real.parent.name == "subagents" else real.parent


def detect(path: Path, *, within: Confine | None = None) -> str | None:
    """``claude-code``, ``codex`` or ``jsonl`` (a threadloom transcript) from a file's first
    JSON lines; None when none fits (or it is not a regular file below ``within``, by default
    its own directory)."""
    return detect_objects(head_objects(path, within=within or Confine(root_of(path))))


def detect_objects(objs: Iterable[dict[str, object]]) -> str | None:
    for obj in objs:
        if codex.looks_like(obj):
            return codex.FORMAT
        if claude_code.looks_like(obj):
            return claude_code.FORMAT
        if "role" in obj and "content" in obj:
            return "jsonl"
    return None


@dataclass
class _File:
    """A session file to read, its format, and the key its main session will have (for the
    order of writing; None when the first lines do not tell)."""

    path: Path
    kind: str
    key: str | None


@dataclass
class _Later:
    """A file read again after the others: what its sessions wait for."""

    file: _File
    keys: set[str]
    deps: set[str]
    dangling: set[str]


def parse(
    path: Path,
    fmt: str = "auto",
    *,
    known: Mapping[str, list[int]] | None = None,
    named: Mapping[str, str | None] | None = None,
) -> tuple[list[Session], ImportReport]:
    """The sessions of ``path`` (a file, or the session files below a directory) and a report
    of what was skipped, all at once (``batches`` gives them a file at a time)."""
    report = ImportReport()
    sessions = [s for batch in batches(path, fmt, report, known=known, named=named) for s in batch]
    return sessions, report


def batches(
    path: Path,
    fmt: str,
    report: ImportReport,
    *,
    known: Mapping[str, list[int]] | None = None,
    named: Mapping[str, str | None] | None = None,
) -> Iterator[list[Session]]:
    """The sessions of ``path`` a file at a time (a session file with its subagents), each
    batch after every batch it needs (the session that spawned it, the one it was forked from
    or goes on from), so memory holds one file's sessions, never the directory's.

    ``fmt`` is ``claude-code``, ``codex`` or ``auto``. Nothing outside ``root_of(path)`` is
    read, nor anything but regular files (``report.refused`` names what was left out).
    ``known`` maps a file's path to the [size, mtime_ns] it had when it was imported whole:
    such a file that has not changed since (nor any subagent file of its session) is not read
    again, and is listed in ``report.unchanged`` (unless ``named`` — path → the Codex thread
    name it was imported with — differs from the name Codex's index gives it now: a rename).
    A file whose sessions wait for a later file's, or go on from a message of another file
    (a compaction continuing in a new file), is read again after the others."""
    c = Confine(root_of(path), report.refused)
    root = path if path.is_dir() else path.parent
    with confined(c):
        files = _plan(path, fmt, report, c)
        names = codex.index_names(root) if any(f.kind == codex.FORMAT for f in files) else {}
    planned = {f.key for f in files if f.key is not None}
    done: set[str] = set()
    later: list[_Later] = []
    for f in files:
        with confined(c):
            if known is not None and all(_same(x, known) for x in _files_of(f.path)):
                renamed = (
                    f.kind == codex.FORMAT
                    and named is not None
                    and (name := names.get(codex.session_id(f.path))) is not None
                    and name != named.get(str(f.path))
                )
                if not renamed:
                    report.unchanged += [str(x) for x in _files_of(f.path)]
                    done |= {f.key} if f.key else set()
                    continue
            batch = _read(f, names, root)
        keys = {s.key for s in batch} | ({f.key} if f.key else set())
        deps = {d for s in batch for d in (s.parent_key, s.fork_parent_key) if d} - keys
        loose = claude_code.dangling(batch)
        if loose or any(d in planned and d not in done for d in deps):
            later.append(_Later(f, keys, deps, loose))
            continue
        done |= keys
        yield _counted(batch, report)
    if not later:
        return
    with confined(c):
        leads = [f.path for f in files if f.kind == claude_code.FORMAT]
        owner = claude_code.owners({u for x in later for u in x.dangling}, leads)
    key_of = {f.path: f.key for f in files}
    for x in later:
        x.deps |= {k for u in x.dangling if u in owner and (k := key_of[owner[u]])}
    for x in ordered(later, lambda x: x.keys, lambda x: x.deps):
        with confined(c):
            batch = _read(x.file, names, root)
            if x.dangling:
                froms = {owner[u] for u in x.dangling if u in owner and owner[u] != x.file.path}
                others = [s for f in sorted(froms) for s in claude_code.parse_file(f)[:1]]
                claude_code.link([*others, *batch])
        yield _counted(batch, report)


def _plan(path: Path, fmt: str, report: ImportReport, c: Confine) -> list[_File]:
    """The session files to read, in order (subagent files are read with their session)."""
    if not path.is_dir():
        kind = detect(path, within=c) if fmt == "auto" else fmt
        if kind not in _PARSERS:
            report.unrecognized.append(str(path))
            return []
        return [_File(path, kind, _key(path, kind))]
    out = []
    files = c.walk(path, ".jsonl")
    listed = {p for p in files if p.parent.name != "subagents"}
    for f in files:
        if f.parent.name == "subagents" and f.parent.parent.with_suffix(".jsonl") in listed:
            continue  # read with its session
        head = head_objects(f, within=c)
        kind = detect_objects(head)
        if kind not in _PARSERS or (fmt != "auto" and kind != fmt):
            if f.name != codex.INDEX:
                report.unrecognized.append(str(f))
            continue
        out.append(_File(f, kind, _key(f, kind, head)))
    return out


def _key(f: Path, kind: str, head: list[dict[str, Any]] | None = None) -> str | None:
    if kind == codex.FORMAT:
        for o in head if head is not None else head_objects(f, 1):
            p = o.get("payload")
            if o.get("type") == "session_meta" and isinstance(p, dict):
                sid = p.get("id")
                return f"{kind}:{sid}" if isinstance(sid, str) else None
        return f"{kind}:{f.stem}"
    if f.parent.name == "subagents":
        return f"{kind}:{f.parent.parent.name}/{f.stem.removeprefix('agent-')}"
    return None if f.name.startswith("agent-") else f"{kind}:{f.stem}"


def _read(f: _File, names: dict[str, str], root: Path) -> list[Session]:
    batch: list[Session] = _PARSERS[f.kind].parse_file(f.path)
    claude_code.link(batch)
    codex.name_sessions(batch, root, names)
    return batch


def _counted(batch: list[Session], report: ImportReport) -> list[Session]:
    report.files += 1
    report.skipped += sum(s.skipped for s in batch)
    return batch


def _files_of(f: Path) -> list[Path]:
    """A session file and the subagent files read with it."""
    return [f, *confine().files(f.with_suffix("") / "subagents", ".jsonl")]


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
    """Parse ``path`` and write its sessions a file at a time (``batches``: memory holds one
    file's sessions): files imported whole before and unchanged since are not read again;
    their threads are reported unchanged. One import at a time per database
    (``Store.exclusive``): what is stored is read, and what is missing created, with no other
    import in between — two at once make each thread once."""
    async with store.exclusive("import"):
        with paused_collector():
            writer = Writer(store, title=title)
            # a title given is applied to what is stored too: every file is read then
            known = await writer.unchanged_files() if title is None else None
            named = await writer.names()
            report = ImportReport()
            for batch in batches(path, fmt, report, known=known, named=named):
                report.threads += await writer.write([s for s in batch if s.branches], adopt=False)
            report.threads = await writer.adopted(report.threads)
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
    "MAX_FILE",
    "NO_RESULT",
    "Branch",
    "Confine",
    "ImportReport",
    "Session",
    "Written",
    "batches",
    "detect",
    "detect_objects",
    "import_sessions",
    "parse",
    "parse_lines",
    "root_of",
    "write_sessions",
]
