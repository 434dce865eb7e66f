"""Confinement: every path a tool touches is resolved here, inside the workspace, or refused.

The rule is about where a path *resolves*, not how it is spelled: ``..`` components and symlinks
(on the final component or on any directory on the way) are followed component by component from
the workspace root, and the walk is refused the moment it would leave the root. Containment is
checked with ``Path.is_relative_to`` on resolved paths, never with string prefixes (``/w/ws2`` is
not inside ``/w/ws``). The resolved path contains no symlinks; the file is then opened with
``O_NOFOLLOW`` so a symlink swapped in afterwards is refused too, not followed.

Directory walks (``list_files``, ``grep``) never follow a symlink: they list or skip it. So nothing
outside the workspace is read, written or listed.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from ._base import display_path
from ._errors import PathRefused, ToolFailure

_OPEN_FLAGS = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def resolve_in_workspace(
    root: Path, user_path: str, *, must_exist: bool, for_write: bool = False
) -> Path:
    """Resolve ``user_path`` to a symlink-free absolute path inside ``root``, or refuse it.

    Accepted: a path relative to the workspace, or an absolute path that is spelled inside the
    workspace root (models often echo the absolute root back); either way it must also *resolve*
    inside. Refused with ``PathRefused`` naming the reason: an empty path, a NUL byte, a leading
    ``~`` (never expanded: it would mean a home directory), an absolute path outside the root,
    ``..`` that climbs out of the root, a symlink whose target is outside the root, and a dangling
    (or looping) symlink anywhere on the way, since writing through it would create its target.

    ``must_exist``: a missing path raises ``FileNotFoundError``. Otherwise (``for_write``) missing
    trailing components are allowed; the deepest existing ancestor is what gets resolved and
    checked, and the missing part may not contain ``..``. A trailing ``/`` on an existing
    non-directory raises ``NotADirectoryError``.
    """
    root = Path(os.path.realpath(root))
    if user_path == "":
        raise PathRefused("the path is empty")
    if "\x00" in user_path:
        raise PathRefused("the path contains a NUL byte")
    if user_path.startswith("~"):
        raise PathRefused(
            f"{user_path!r}: '~' is not expanded (home directories are outside the workspace); "
            "give a path relative to the workspace"
        )
    parts = [p for p in user_path.split("/") if p not in ("", ".")]
    if os.path.isabs(user_path):
        root_parts = [p for p in root.as_posix().split("/") if p]
        lexical = Path(os.path.normpath(user_path))
        if not lexical.is_relative_to(root) or parts[: len(root_parts)] != root_parts:
            raise PathRefused(
                f"absolute path outside the workspace: {user_path} (the workspace is {root}; "
                "prefer paths relative to it)"
            )
        parts = parts[len(root_parts) :]
    else:
        lexical = Path(os.path.normpath(root / user_path))
        if not lexical.is_relative_to(root):
            raise PathRefused(f"path escapes the workspace: {user_path} resolves to {lexical}")

    current = root
    for index, part in enumerate(parts):
        if part == "..":
            if current == root:
                raise PathRefused(
                    f"path escapes the workspace: {user_path} climbs above the workspace root"
                )
            current = current.parent
            continue
        candidate = current / part
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            return _missing_tail(root, current, parts[index:], user_path, must_exist=must_exist)
        current = _follow_link(root, candidate) if stat.S_ISLNK(st.st_mode) else candidate
        if index < len(parts) - 1 and not current.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(current))
    if not current.is_relative_to(root):  # defence in depth: the walk above guarantees this
        raise PathRefused(f"path escapes the workspace: {user_path}")
    if user_path.endswith("/") and not current.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(current))
    return current


def _follow_link(root: Path, link: Path) -> Path:
    target = Path(os.path.realpath(link))
    points_to = os.readlink(link)
    shown = f"{display_path(root, link)} -> {points_to}"
    if Path(os.path.normpath(link.parent / points_to)) != target:
        shown += f" (resolves to {target})"
    if not target.is_relative_to(root):
        raise PathRefused(f"symlink points outside the workspace: {shown}")
    if not os.path.exists(target):
        raise PathRefused(f"dangling symlink (its target does not exist or loops): {shown}")
    return target


def _missing_tail(
    root: Path, existing: Path, tail: list[str], user_path: str, *, must_exist: bool
) -> Path:
    missing = existing / tail[0]
    if must_exist:
        wanted = existing.joinpath(*tail)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(wanted))
    if ".." in tail:
        raise PathRefused(f"{user_path}: '..' after a directory that does not exist ({missing})")
    return existing.joinpath(*tail)


def open_regular(
    path: Path, root: Path, *, write: bool = False, create: bool = False, exclusive: bool = False
) -> int:
    """Open a resolved path without following a symlink on its last component; the result must
    be a regular file (a FIFO would block a reader forever, a device is never a source file).
    ``O_NONBLOCK`` keeps opening a FIFO from blocking before the check. Returns a file descriptor.
    """
    flags = _OPEN_FLAGS | getattr(os, "O_NONBLOCK", 0)
    flags |= os.O_WRONLY if write else os.O_RDONLY
    if create:
        flags |= os.O_CREAT | (os.O_EXCL if exclusive else 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathRefused(
                f"symlink appeared on the path while it was opened: {display_path(root, path)}"
            ) from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ToolFailure(f"{display_path(root, path)} is a directory (use list_files)")
        if not stat.S_ISREG(mode):
            raise ToolFailure(f"{display_path(root, path)} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def replace_contents(fd: int, data: bytes) -> None:
    """Truncate the open regular file and write ``data`` whole (same inode: permissions, owner
    and hard links are kept), then close the descriptor."""
    with os.fdopen(fd, "wb") as file:
        file.truncate(0)
        file.write(data)


def make_parent_dirs(root: Path, path: Path) -> list[Path]:
    """Create the missing directories above ``path`` one at a time (never through a symlink:
    ``resolve_in_workspace`` resolved everything that existed). Returns the ones created."""
    missing: list[Path] = []
    parent = path.parent
    while not parent.exists() and parent.is_relative_to(root) and parent != root:
        missing.append(parent)
        parent = parent.parent
    created = []
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            if os.path.islink(directory) or not directory.is_dir():
                raise PathRefused(
                    f"{display_path(root, directory)} changed while it was being created"
                ) from None
            continue
        created.append(directory)
    return created


def walk_tree(
    root: Path,
    top: Path,
    *,
    skip: Callable[[bytes, bool], bool] | None = None,
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Yield ``(path relative to root, entry)`` for everything below directory ``top``, in tree
    order (siblings by the bytes of their names, a directory's contents where it sorts) — the
    order ripgrep's ``--sort path`` gives. Entries named ``.git`` are skipped; symlinks are
    yielded but never descended into; directories themselves are not yielded. ``skip(relpath
    bytes, is_dir)`` prunes entries (a skipped directory is not entered). Unreadable directories
    are passed over silently.
    """
    top_rel = os.path.relpath(top, root)
    prefix = "" if top_rel == "." else top_rel + "/"
    stack: list[tuple[str, Iterator[os.DirEntry[str]]]] = []

    def push(directory: str, rel_prefix: str) -> None:
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: os.fsencode(e.name))
        except OSError:
            return
        stack.append((rel_prefix, iter(entries)))

    push(str(top), prefix)
    while stack:
        rel_prefix, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        if entry.name == ".git":
            continue
        rel = rel_prefix + entry.name
        is_dir = not entry.is_symlink() and entry.is_dir(follow_symlinks=False)
        if skip is not None and skip(os.fsencode(rel), is_dir):
            continue
        if is_dir:
            push(entry.path, rel + "/")
        else:
            yield rel, entry


def link_target_inside(root: Path, link: str) -> bool:
    """Whether a symlink resolves to an existing path inside the workspace."""
    target = Path(os.path.realpath(link))
    return target.is_relative_to(root) and os.path.exists(target)
