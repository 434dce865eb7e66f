"""The pure-Python ``grep`` engine, used when ripgrep is not installed.

It mirrors ``rg --hidden --no-ignore --no-follow --sort path --encoding none --glob G
--glob '!.git'``: every file below the search path in tree order, hidden ones included, ``.git``
and symlinks skipped (never followed), non-regular files skipped, the glob applied with
ripgrep's override rules, binary files (any NUL byte) skipped, lines split on ``\\n`` and each
matched without its terminator. The search path itself is never filtered by the glob.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import regex

from ._errors import ToolFailure
from ._glob import OverrideGlob
from ._grep_common import GrepResult, show_line
from ._paths import Guard, open_regular, walk_tree

BUDGET_S = 10.0
"""How long one search may spend matching: a pattern that backtracks catastrophically
(``(a|aa)+$``) would otherwise run for ever in a thread nothing can stop (ripgrep's engine has
no such patterns)."""


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise ToolFailure(f"invalid regex {pattern!r}: {exc}") from None


def grep_python(
    root: Path,
    target: Path,
    pattern: str,
    glob: OverrideGlob | None,
    *,
    cap: int,
    guard: Guard | None = None,
) -> GrepResult:
    rx = compile_pattern(pattern)
    deadline = time.monotonic() + BUDGET_S
    result = GrepResult(cap=cap)
    guard = guard or Guard.of(root)
    for rel, path in _candidates(root, target, glob, guard):
        try:
            with os.fdopen(open_regular(path, root, guard=guard), "rb") as file:
                matches: list[tuple[int, str]] = []
                count = 0
                binary = False
                room = result.room
                for number, raw in enumerate(file, start=1):
                    if b"\x00" in raw:
                        binary = True
                        break
                    line = raw.removesuffix(b"\n")
                    text = line.decode("utf-8", "replace")
                    try:
                        found = rx.search(text, timeout=max(deadline - time.monotonic(), 0.001))
                    except TimeoutError:
                        raise _TooSlow(f"{rel}:{number}") from None
                    if found:
                        count += 1
                        if len(matches) < room:
                            matches.append((number, show_line(line)))
        except _TooSlow as slow:
            raise ToolFailure(
                f"the pattern {pattern[:80]!r} took longer than {BUDGET_S:g} s (at {slow}): it"
                " backtracks too much; make it simpler or more specific"
            ) from None
        except (OSError, ToolFailure):
            continue  # unreadable or replaced meanwhile: ripgrep skips it too
        if not binary and count:
            result.add_file(os.fsencode(rel), matches, count)
    return result


class _TooSlow(Exception):
    """The search ran past ``BUDGET_S`` (where, in ``args``)."""


def _candidates(
    root: Path, target: Path, glob: OverrideGlob | None, guard: Guard
) -> Iterator[tuple[str, Path]]:
    if not target.is_dir():
        yield os.path.relpath(target, root), target
        return

    def skip(rel: bytes, is_dir: bool) -> bool:
        return glob is not None and glob.decide(rel, is_dir) == "exclude"

    for rel, entry in walk_tree(root, target, skip=skip, guard=guard):
        if not entry.is_symlink() and entry.is_file(follow_symlinks=False):
            yield rel, Path(entry.path)
