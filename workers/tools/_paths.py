"""Confinement: every path a tool touches is resolved here, inside the workspace, or refused.

The rule is about where a path *resolves*, not how it is spelled: ``..`` components and symlinks
(on the final component or on any directory on the way) are followed component by component from
the workspace root, and the walk is refused the moment it would leave the root. Containment is
checked with ``Path.is_relative_to`` on resolved paths, never with string prefixes (``/w/ws2`` is
not inside ``/w/ws``). The resolved path contains no symlinks; the file is then opened with
``O_NOFOLLOW`` so a symlink swapped in afterwards is refused too, not followed.

Opening is race-free: the resolved path is walked again from a descriptor of the root, one
component at a time (``O_PATH|O_NOFOLLOW|O_DIRECTORY`` relative to the parent's descriptor), and
the file is opened relative to its parent's descriptor with ``O_NOFOLLOW``; a directory swapped
for a symlink meanwhile is met as a symlink, never followed (resolution restarts, so an
in-workspace symlink still works). The opened file's real path (``/proc/self/fd``) is checked
once more.

``Guard`` adds what no tool may touch even inside the workspace: ``hidden`` paths (threadloom's
database, its ``-wal``/``-shm``/``-journal``, the job logs, and always the workspace's
``.threadloom/``) are refused by resolved path and, for the files in them, by (device, inode), so
a hard link is refused too; and anything in a ``.git`` directory, or a ``.git`` file, anywhere in
the workspace is read-only.

Directory walks (``list_files``, ``grep``) never follow a symlink: they list or skip it, and they
skip hidden entries. So nothing outside the workspace is read, written or listed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ._base import display_path
from ._errors import PathRefused, ToolFailure

_OPEN_FLAGS = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = (
    getattr(os, "O_PATH", os.O_RDONLY)
    | os.O_DIRECTORY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_RETRIES = 8
STATE_DIR = ".threadloom"
"""threadloom's directory in a workspace (the default database and logs): always hidden."""
_HIDDEN_SCAN_LIMIT = 256


class PathChanged(Exception):
    """A component of a resolved path turned into a symlink (or a non-directory) while it was
    being opened: resolve again."""


@dataclass(frozen=True)
class Guard:
    """What the tools may not reach inside the workspace. Build one per call with ``Guard.of``.

    ``hidden``: real paths refused for every access (the path itself and anything below it);
    ``hidden_ids``: (device, inode) of the regular files in them, so a hard link is refused too.
    """

    root: Path
    hidden: tuple[Path, ...] = ()
    hidden_ids: frozenset[tuple[int, int]] = frozenset()

    @classmethod
    def of(cls, root: Path, hidden: Iterable[Path] = ()) -> Guard:
        real: list[Path] = []
        ids: set[tuple[int, int]] = set()
        budget = _HIDDEN_SCAN_LIMIT
        for path in [root / STATE_DIR, *hidden]:
            resolved = Path(os.path.realpath(path))
            if root.is_relative_to(resolved):
                continue  # it holds the whole workspace: nothing to hide inside it
            real.append(resolved)
            pending = [(resolved, 0)]
            while pending and budget > 0:
                current, depth = pending.pop()
                budget -= 1
                try:
                    st = os.stat(current, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    ids.add((st.st_dev, st.st_ino))
                elif stat.S_ISDIR(st.st_mode) and depth < 2:
                    try:
                        pending += [(Path(e.path), depth + 1) for e in os.scandir(current)]
                    except OSError:
                        continue
        return cls(root, tuple(real), frozenset(ids))

    def is_hidden(self, path: Path, st: os.stat_result | None = None) -> bool:
        """Whether the real path ``path`` (or the file ``st`` describes) is hidden."""
        if any(path == h or path.is_relative_to(h) for h in self.hidden):
            return True
        return st is not None and (st.st_dev, st.st_ino) in self.hidden_ids

    def check(self, path: Path, *, write: bool) -> None:
        """Refuse a resolved path that is hidden, or (``write``) inside git's metadata."""
        try:
            st: os.stat_result | None = os.stat(path, follow_symlinks=False)
        except OSError:
            st = None
        if self.is_hidden(path, st):
            raise PathRefused(
                f"{display_path(self.root, path)} is threadloom's own record (its database, logs "
                f"or {STATE_DIR}/): no tool may read, write or list it"
            )
        if write and is_git_path(self.root, path):
            raise PathRefused(
                f"{display_path(self.root, path)} is git metadata (a .git directory or file): "
                "it is read-only to the file tools; use bash with git commands for git"
            )

    def check_open(self, fd: int, path: Path, *, write: bool) -> None:
        """Check an open descriptor: its device and inode, and its real path per
        ``/proc/self/fd`` (inside the root, not hidden, not git metadata when writing)."""
        shown = display_path(self.root, path)
        if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) in self.hidden_ids:
            raise PathRefused(f"{shown} is threadloom's own record: no tool may read or write it")
        try:
            real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return  # no /proc: the descriptor walk is the guarantee
        if not real.is_relative_to(self.root):
            raise PathRefused(f"{shown} changed while it was opened and now lies outside")
        self.check(real, write=write)


def is_git_path(root: Path, path: Path) -> bool:
    """Whether ``path`` (resolved, inside ``root``) is a ``.git`` entry or inside one."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False
    return any(part.casefold() == ".git" for part in parts)


def resolve_in_workspace(
    root: Path,
    user_path: str,
    *,
    must_exist: bool,
    for_write: bool = False,
    guard: Guard | None = None,
) -> Path:
    """Resolve like ``_resolve`` (below); with ``guard``, the result is also refused when it is
    hidden or (``for_write``) git metadata."""
    try:
        path = _resolve(root, user_path, must_exist=must_exist, for_write=for_write)
    except FileNotFoundError:
        if guard is not None:  # a missing hidden path is refused too (its absence is no answer)
            with contextlib.suppress(OSError):
                guard.check(_resolve(root, user_path, must_exist=False), write=for_write)
        raise
    if guard is not None:
        guard.check(path, write=for_write)
    return path


def _resolve(root: Path, user_path: str, *, must_exist: bool, for_write: bool = False) -> Path:
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
    path: Path,
    root: Path,
    *,
    write: bool = False,
    create: bool = False,
    exclusive: bool = False,
    guard: Guard | None = None,
) -> int:
    """Open a resolved path race-free; the result must be a regular file (a FIFO would block a
    reader forever, a device is never a source file). Every directory on the way is opened
    relative to its parent with ``O_NOFOLLOW``, and so is the file: a component swapped for a
    symlink meanwhile is never followed (the path is resolved again, a few times at most).
    ``O_NONBLOCK`` keeps opening a FIFO from blocking before the check. Returns a descriptor.
    """
    guard = guard or Guard.of(root)
    flags = _OPEN_FLAGS | getattr(os, "O_NONBLOCK", 0)
    flags |= os.O_WRONLY if write else os.O_RDONLY
    if create:
        flags |= os.O_CREAT | (os.O_EXCL if exclusive else 0)
    for _ in range(_RETRIES):
        try:
            fd = _open_at(root, path, flags)
            break
        except PathChanged:
            rel = os.path.relpath(path, root)
            path = resolve_in_workspace(
                root, rel, must_exist=not create, for_write=write, guard=guard
            )
    else:
        raise PathRefused(
            f"{display_path(root, path)} keeps changing (a directory or symlink is being swapped)"
        )
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ToolFailure(f"{display_path(root, path)} is a directory (use list_files)")
        if not stat.S_ISREG(mode):
            raise ToolFailure(f"{display_path(root, path)} is not a regular file")
        guard.check_open(fd, path, write=write)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_at(root: Path, path: Path, flags: int) -> int:
    parts = path.relative_to(root).parts
    if not parts:
        raise ToolFailure(". is a directory (use list_files)")
    parent, _ = _walk_dirs(root, parts[:-1], create=False)
    try:
        return os.open(parts[-1], flags, 0o666, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathChanged(str(path)) from exc
        raise
    finally:
        os.close(parent)


def _walk_dirs(root: Path, parts: Iterable[str], *, create: bool) -> tuple[int, list[Path]]:
    """A descriptor of the directory ``root/parts``, each component opened relative to the last
    with ``O_NOFOLLOW``; missing ones are made (``create``). Returns it and the ones made."""
    fd = os.open(root, _DIR_FLAGS)
    current = root
    made: list[Path] = []
    try:
        for part in parts:
            current = current / part
            try:
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(part, dir_fd=fd)
                        made.append(current)
                    except FileExistsError:
                        pass
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise PathChanged(str(current)) from exc
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, made


def replace_contents(fd: int, data: bytes, root: Path, path: Path) -> None:
    """Give the open regular file ``fd`` (at ``path``) the contents ``data`` atomically, then
    close the descriptor: a reader sees the old contents or the new, never a part (workers that
    share a directory import each other's modules while they edit them). ``data`` goes to a new
    file beside it, which takes the old one's mode (and owner, where we may), and is renamed over
    the name through the directory's descriptor, so a directory swapped for a symlink meanwhile
    is never followed. A file with other hard links, or whose name no longer holds the file
    opened, is rewritten in place instead (truncate, write): a rename would cut the links off,
    or replace a file that was not checked."""
    with os.fdopen(fd, "wb") as file:
        opened = os.fstat(file.fileno())
        parts = path.relative_to(root).parts
        ours = os.geteuid() in (0, opened.st_uid)  # else the new file would change owner
        if opened.st_nlink == 1 and ours and _rename_over(root, parts, opened, data):
            return
        file.truncate(0)
        file.write(data)


def _rename_over(root: Path, parts: tuple[str, ...], opened: os.stat_result, data: bytes) -> bool:
    """Write ``data`` to a new file in the directory of ``parts`` and rename it over the last
    part, if that name still holds the file ``opened``. False: nothing was done."""
    try:
        parent, _ = _walk_dirs(root, parts[:-1], create=False)
    except (OSError, PathChanged):
        return False
    name = parts[-1]
    temp = f".{name}.{os.urandom(4).hex()}.threadloom-write"
    try:
        now = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS
        out = os.open(temp, flags, 0o600, dir_fd=parent)
        try:
            with os.fdopen(out, "wb") as new:
                new.write(data)
                os.fchmod(new.fileno(), stat.S_IMODE(opened.st_mode))
                if os.geteuid() == 0 and (opened.st_uid, opened.st_gid) != (0, 0):
                    os.fchown(new.fileno(), opened.st_uid, opened.st_gid)
            os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
            raise
        return True
    finally:
        os.close(parent)


def make_parent_dirs(root: Path, path: Path) -> list[Path]:
    """Create the missing directories above ``path`` one at a time, each relative to its
    parent's descriptor (never through a symlink, even one swapped in meanwhile). Returns the
    ones created."""
    parts = path.relative_to(root).parts[:-1]
    try:
        fd, made = _walk_dirs(root, parts, create=True)
    except PathChanged:
        raise PathRefused(
            f"{display_path(root, path.parent)} changed while it was being created"
        ) from None
    os.close(fd)
    return made


def walk_tree(
    root: Path,
    top: Path,
    *,
    skip: Callable[[bytes, bool], bool] | None = None,
    guard: Guard | None = None,
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Yield ``(path relative to root, entry)`` for everything below directory ``top``, in tree
    order (siblings by the bytes of their names, a directory's contents where it sorts) — the
    order ripgrep's ``--sort path`` gives. Entries named ``.git`` are skipped; symlinks are
    yielded but never descended into; directories themselves are not yielded. ``skip(relpath
    bytes, is_dir)`` prunes entries (a skipped directory is not entered). Hidden entries
    (``guard``: threadloom's record, by path or inode) are never yielded nor entered. Unreadable
    directories are passed over silently.
    """
    guard = guard or Guard.of(root)
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
        if _hidden_entry(guard, entry):
            continue
        rel = rel_prefix + entry.name
        is_dir = not entry.is_symlink() and entry.is_dir(follow_symlinks=False)
        if skip is not None and skip(os.fsencode(rel), is_dir):
            continue
        if is_dir:
            push(entry.path, rel + "/")
        else:
            yield rel, entry


def _hidden_entry(guard: Guard, entry: os.DirEntry[str]) -> bool:
    path = Path(entry.path)
    if any(path == h or path.is_relative_to(h) for h in guard.hidden):
        return True
    if not guard.hidden_ids or not any(ino == entry.inode() for _, ino in guard.hidden_ids):
        return False
    try:
        return guard.is_hidden(path, entry.stat(follow_symlinks=False))
    except OSError:
        return True


def link_target_inside(root: Path, link: str, guard: Guard | None = None) -> bool:
    """Whether a symlink resolves to an existing path inside the workspace (and, with
    ``guard``, not to a hidden one)."""
    target = Path(os.path.realpath(link))
    if not (target.is_relative_to(root) and os.path.exists(target)):
        return False
    if guard is None:
        return True
    try:
        st = os.stat(target)
    except OSError:
        return False
    return not guard.is_hidden(target, st)
