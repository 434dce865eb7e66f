"""Which workspace paths a command changed: a stat snapshot before it and after it, compared.

``bash`` records, with each call's result, the paths the call added, modified or deleted
(``store.Effects``), so that the result check (``orchestrator.runtime.check``) knows a change
whether a file tool or a command made it (SPEC "Checked results"). A snapshot is one walk of the
workspace, in-process (no git subprocess: a worker may write ``.git/config`` and the walk must
never run what it names), keeping each file's ``(mtime_ns, ctime_ns, size, inode)``; a path
whose tuple differs was modified — a rewrite with the same bytes counts as one, as ``touch``
does.

Left out, as SPEC says, of what counts as a change: what git would ignore — the ``.gitignore``
files of the workspace and of its repository's directories above it, and the repository's
``.git/info/exclude``, matched with git's own rules (``pathspec``'s ``GitIgnoreSpec``: the last
matching pattern wins, a deeper file over a higher one, and an ignored directory is not entered,
so ``node_modules`` or ``.venv`` cost nothing) — and ``.git``, ``.threadloom``, ``__pycache__``,
``*.pyc`` and the paths no tool may reach (``ToolContext.hidden``). The walk stops after
``MAX_ENTRIES`` entries; a snapshot cut short is ``complete=False`` and so is the record made
from it (the check then leaves what rests on it unverified, never guesses).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec

from store import Change

MAX_ENTRIES = 50_000
"""Entries (files and directories) one snapshot visits at most."""
ALWAYS_SKIPPED = frozenset({".git", ".threadloom", "__pycache__"})

Stamp = tuple[int, int, int, int]


Rules = list[tuple[str, GitIgnoreSpec]]
"""The ignore rules in force in a directory: (the directory each file of rules is in, relative
to the workspace; its rules), highest first last."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    files: dict[str, Stamp]
    """Each file (or symlink, not followed) by its path relative to the workspace, ignored
    ones included: a file is matched against the rules only once it changed (``changed_paths``),
    so a walk costs a stat a file; directories are matched as they are met (an ignored one is
    not entered)."""
    complete: bool
    rules: dict[str, Rules]
    """The rules in force in each directory walked, by its path ('' for the workspace)."""


class Window:
    """One command's time in a workspace (``watch``): ``concurrent`` turns True when another
    command or a file tool's write happened in the same workspace meanwhile — its changes may
    then be in this command's snapshots too (a parallel call of the turn, another worker sharing
    the directory). Within this process only: a worker elsewhere is not seen."""

    __slots__ = ("concurrent", "key")

    def __init__(self, key: str) -> None:
        self.key = key
        self.concurrent = False


_OPEN: dict[str, set[Window]] = {}
_OPEN_LOCK = threading.Lock()


def open_window(workspace: Path) -> Window:
    """Start watching the workspace for the length of one command (``close_window`` ends it)."""
    window = Window(os.path.realpath(workspace))
    with _OPEN_LOCK:
        others = _OPEN.setdefault(window.key, set())
        if others:
            window.concurrent = True
            for w in others:
                w.concurrent = True
        others.add(window)
    return window


def close_window(window: Window) -> None:
    with _OPEN_LOCK:
        others = _OPEN.get(window.key)
        if others is not None:
            others.discard(window)
            if not others:
                del _OPEN[window.key]


def note_write(workspace: Path) -> None:
    """A file tool wrote in the workspace: every command watching it now is concurrent."""
    key = os.path.realpath(workspace)
    with _OPEN_LOCK:
        for w in _OPEN.get(key, ()):
            w.concurrent = True


def changed_paths(before: Snapshot, after: Snapshot) -> list[Change]:
    """What happened between two snapshots of one workspace, sorted by path."""
    out: list[Change] = []
    old, new = before.files, after.files
    for path, stamp in new.items():
        was = old.get(path)
        if was is None:
            out.append(Change(path=path, action="added"))
        elif was != stamp:
            out.append(Change(path=path, action="modified"))
    out += [Change(path=p, action="deleted") for p in old.keys() - new.keys()]
    kept = []
    for c in out:
        folder = c.path.rpartition("/")[0]
        rules = after.rules.get(folder, before.rules.get(folder, []))
        if not c.path.endswith(".pyc") and not _ignored(rules, c.path, False):
            kept.append(c)
    kept.sort(key=lambda c: c.path)
    return kept


def take_snapshot(
    workspace: Path, *, hidden: Sequence[Path] = (), limit: int = MAX_ENTRIES
) -> Snapshot:
    """The workspace's files now (blocking: run it on a thread). See the module docstring."""
    root = Path(os.path.realpath(workspace))
    repo = _repo_root(root)
    rules: Rules = _rules_above(repo, root) if repo is not None else []
    skip = {os.path.realpath(h) for h in hidden}
    files: dict[str, Stamp] = {}
    chains: dict[str, Rules] = {}
    seen = 0
    stack: list[tuple[str, str, Rules]] = [(str(root), "", rules)]
    while stack:
        folder, rel, inherited = stack.pop()
        here = _gitignore(folder)
        chain = [*inherited, (rel, here)] if here is not None else inherited
        chains[rel] = chain
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # unreadable or gone meanwhile: nothing of it is known either way
        for entry in entries:
            seen += 1
            if seen > limit:
                return Snapshot(files, complete=False, rules=chains)
            name = entry.name
            if name in ALWAYS_SKIPPED or entry.path in skip:
                continue
            path = f"{rel}/{name}" if rel else name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not _ignored(chain, path, True):
                        stack.append((entry.path, path, chain))
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                files[path] = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
    return Snapshot(files, complete=True, rules=chains)


def _ignored(chain: Rules, path: str, is_dir: bool) -> bool:
    """Git's answer for ``path`` (relative to the workspace): the deepest rules file with a
    pattern that matches decides, the last such pattern in it (a ``!`` one un-ignores)."""
    for base, spec in reversed(chain):
        if base and not path.startswith(base + "/"):
            continue
        inner = path[len(base) + 1 :] if base else path
        found = spec.check_file(inner + "/" if is_dir else inner)
        if found.include is not None:
            return bool(found.include)
    return False


def _repo_root(folder: Path) -> Path | None:
    """The nearest directory at or above ``folder`` that holds a ``.git`` (a worktree's is a
    file), or None: the repository whose ignore rules apply."""
    for candidate in (folder, *folder.parents):
        if os.path.lexists(candidate / ".git"):
            return candidate
    return None


def _rules_above(repo: Path, root: Path) -> Rules:
    """The rules that apply to the workspace from outside it: the repository's
    ``info/exclude`` (lowest), then each ``.gitignore`` from the repository's top down to the
    workspace's parent. Their patterns are rewritten relative to the workspace where they can
    be; a pattern anchored above it that cannot is dropped (it names nothing inside)."""
    out: Rules = []
    info = _info_exclude(repo)
    chain: list[tuple[Path, list[str]]] = []
    if info:
        chain.append((repo, info))
    folder = repo
    parts = root.relative_to(repo).parts
    for i in range(len(parts)):
        lines = _lines(folder / ".gitignore")
        if lines:
            chain.append((folder, lines))
        folder = folder / parts[i]
    for base, lines in chain:
        inside = root.relative_to(base).as_posix()
        spec = GitIgnoreSpec.from_lines(_relative_to(lines, inside))
        out.append(("", spec))
    return out


def _relative_to(lines: Iterable[str], inside: str) -> list[str]:
    """A rules file's patterns as seen from its subdirectory ``inside``: patterns without a
    slash (they match at any depth) stay; anchored ones that start with ``inside/`` lose that
    start; other anchored ones cannot match inside it and go."""
    out = []
    for raw in lines:
        line = raw.rstrip("\n")
        negated = line.startswith("!")
        body = line[1:] if negated else line
        if not body.strip() or body.startswith("#"):
            continue
        core = body.rstrip("/")
        if "/" not in core or core.startswith("**/"):
            out.append(line)
            continue
        anchored = core.lstrip("/")
        prefix = inside + "/"
        if anchored.startswith(prefix):
            rest = body.lstrip("/")[len(prefix) :]
            out.append(("!" if negated else "") + "/" + rest)
    return out


def _info_exclude(repo: Path) -> list[str]:
    dotgit = repo / ".git"
    if dotgit.is_dir():
        return _lines(dotgit / "info" / "exclude")
    return []  # a linked worktree: its main repository's exclude is not looked for


_CACHE: dict[str, tuple[tuple[int, int, int], GitIgnoreSpec | None]] = {}


def _gitignore(folder: str) -> GitIgnoreSpec | None:
    """The folder's ``.gitignore`` compiled, or None; compiled once per version of the file
    (a snapshot is taken twice a command, and most commands change no rules)."""
    path = os.path.join(folder, ".gitignore")
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    lines = _lines(Path(path))
    spec = GitIgnoreSpec.from_lines(lines) if lines else None
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[path] = (key, spec)
    return spec


def _lines(path: Path) -> list[str]:
    """A rules file's pattern lines (blank and comment lines left out: a file of only those,
    like a fresh repository's ``info/exclude``, has no rules to match)."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]
