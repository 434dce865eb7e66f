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

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from store import Store

from . import claude_code, codex
from ._draft import COMPACTION_MARK, NO_RESULT, Branch, Session
from ._lines import head_objects
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


def parse(path: Path, fmt: str = "auto") -> tuple[list[Session], ImportReport]:
    """The sessions of ``path`` (a file, or the session files below a directory) and a report
    of what was skipped. ``fmt`` is ``claude-code``, ``codex`` or ``auto``."""
    report = ImportReport()
    sessions: list[Session] = []
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        listed = {p for p in files if p.parent.name != "subagents"}
        for f in files:
            if f.parent.name == "subagents" and f.parent.parent.with_suffix(".jsonl") in listed:
                continue  # read with its session
            kind = detect(f)
            if kind not in _PARSERS or (fmt != "auto" and kind != fmt):
                report.unrecognized.append(str(f))
                continue
            sessions += _PARSERS[kind].parse_file(f)
            report.files += 1
    else:
        kind = detect(path) if fmt == "auto" else fmt
        if kind in _PARSERS:
            sessions += _PARSERS[kind].parse_file(path)
            report.files += 1
        else:
            report.unrecognized.append(str(path))
    claude_code.link(sessions)
    report.skipped = sum(s.skipped for s in sessions)
    return sessions, report


def parse_lines(lines: Iterable[str], fmt: str, *, name: str = "<stdin>") -> list[Session]:
    """The session of JSON lines read from elsewhere (stdin): no subagent or output files."""
    parsed: list[Session] = _PARSERS[fmt].parse_file(Path(name), list(lines))
    return parsed


async def import_sessions(
    store: Store, path: Path, *, fmt: str = "auto", title: str | None = None
) -> ImportReport:
    """Parse ``path`` and write its sessions (see the module docstring)."""
    sessions, report = parse(path, fmt)
    report.threads = await write_sessions(store, sessions, title=title)
    return report


async def write_sessions(
    store: Store, sessions: Iterable[Session], *, title: str | None = None
) -> list[Written]:
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
