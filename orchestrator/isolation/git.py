"""Running git for worktree isolation: every git threadloom runs goes through ``git()``.

It runs ``git`` as a subprocess (``asyncio.create_subprocess_exec``, never a shell) under
configuration threadloom controls: no inherited ``GIT_*`` variable but the identity, no system
or global config (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), and ``-c``
overrides for every setting that names a program (``SAFE_CONFIG``). The repository's own
configuration is not read from the repository either: every command that may run a filter,
merge or diff driver is pointed (``GIT_COMMON_DIR``) at a private common dir whose ``config`` is
threadloom's copy of the repository's, made once per process (``private_common_dir``), and whose
other entries link to the repository's own (objects, refs, worktrees, ``info``). Its drivers are
exactly those the repository had when the job started (``JobBase.drivers``, ``trust_drivers``),
since the user's own (git-lfs) must keep working; a driver a worker writes into ``.git/config``
or a file it includes — at any moment, even as threadloom's git starts — is never read. Every
git runs in its own process group, killed and reaped when the call is cancelled or times out.

Errors: ``WorktreeError`` (git failed: exit 1) and its subclass ``RepoStateError`` (the user's
repository cannot be isolated or the request cannot be honoured: exit 2), from
``orchestrator.errors``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import RepoStateError, WorktreeError

_KEPT_GIT_VARS = frozenset(
    {"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"}
)
"""The only ``GIT_*`` variables threadloom's git inherits (the user's identity): every other one
could redirect git to another repository or index, or name a program to run."""
_FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "threadloom",
    "GIT_AUTHOR_EMAIL": "threadloom@localhost",
    "GIT_COMMITTER_NAME": "threadloom",
    "GIT_COMMITTER_EMAIL": "threadloom@localhost",
}
NONE_HINT = 'use isolation = "none" to let workers share the directory'


@dataclass(frozen=True, slots=True)
class GitResult:
    code: int
    out: str
    err: str


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for every git call: no inherited ``GIT_*`` variable but the identity, no
    system or global configuration (nothing of ``/etc/gitconfig`` or ``~/.gitconfig`` runs),
    no prompt waiting for a terminal, output not localised."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEPT_GIT_VARS}
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_NO_REPLACE_OBJECTS": "1",
        }
    )
    if extra:
        env.update(extra)
    return env


SAFE_CONFIG = tuple(
    arg
    for pair in (
        "core.hooksPath=/dev/null",
        "core.fsmonitor=false",
        "core.pager=cat",
        "core.editor=true",
        "core.askPass=true",
        "core.sshCommand=ssh",
        "core.attributesFile=/dev/null",
        "credential.helper=",
        "commit.gpgSign=false",
        "tag.gpgSign=false",
        "gc.auto=0",
        "maintenance.auto=false",
        "submodule.recurse=false",
        "protocol.ext.allow=never",
        "diff.external=true",
    )
    for arg in ("-c", pair)
)
"""Command-line configuration that wins over the repository's: nothing runs because threadloom
ran git — no hooks (``worktree add`` would run post-checkout), no fsmonitor, pager, editor,
askpass, credential helper, signing program, external diff, background gc or ``ext::``
transport; no global attributes file. (System and global configuration are not read at all:
``git_env``; the repository's is read from threadloom's private copy: ``private_common_dir``.)"""

GIT_TIMEOUT_S = 600.0

# ----------------------------------------------------------------- the configuration git reads

_DRIVER_KEY = re.compile(
    r"(filter\..+\.(clean|smudge|process|required)|merge\..+\.driver|diff\..+\.(textconv|command))"
)
"""Repository configuration that names a program git runs on file contents (or, ``required``,
makes a filter's absence fatal): ``git config --list`` spells sections and keys in lower case,
subsections as written."""
_NOT_COPIED = re.compile(r"(include|includeif)\..*|extensions\.worktreeconfig")
"""Keys never copied into the private configuration: includes (their values are copied, already
read in), and the switch that would make git read a worktree's own ``config.worktree``."""
_NEEDS_NO_DRIVER = frozenset(
    {"rev-parse", "update-ref", "commit-tree", "for-each-ref", "check-ref-format", "merge-base",
     "var", "config", "init"}
)  # fmt: skip
"""Commands that never read file contents through a driver: run on the repository's own
configuration (``write-tree`` and ``ls-files`` may refresh the index, which runs clean filters;
``rev-parse --git-common-dir`` must name the real common dir)."""
_LINKED_ALWAYS = ("packed-refs", "shallow", "logs", "worktrees", "lfs")
"""Entries of the common dir linked from the private one even before they exist, because git
(or git-lfs) may create them while a command runs."""

_TRUSTED: dict[str, dict[str, str]] = {}
"""The driver keys each repository had when its job started (``drivers_of``), by the
repository's top level and its common dir. A repository not here trusts no driver at all."""
_COMMON_OF: dict[str, Path] = {}
"""The common dir of each directory git was run in (a repository's top level, a mirror)."""
_SHADOWS: dict[tuple[str, tuple[tuple[str, str], ...]], Path] = {}
"""The private common dir made for each repository and set of trusted drivers."""
_SHADOW_ROOT: list[Path] = []


def parse_drivers(listing: str) -> dict[str, str]:
    """The driver keys of ``git config --list -z`` output (the last value of a key wins)."""
    found: dict[str, str] = {}
    for entry in listing.split("\0"):
        key, _, value = entry.partition("\n")
        if _DRIVER_KEY.fullmatch(key):
            found[key] = value
    return found


def trust_drivers(root: Path, common: Path, drivers: Mapping[str, str]) -> None:
    """Let git run, in the repository at ``root`` (common dir ``common``), exactly the
    ``drivers`` the user had configured when the job started, and no other."""
    common = real_path(common)
    _COMMON_OF[str(real_path(root))] = common
    for place in (root, common):
        _TRUSTED[str(real_path(place))] = dict(drivers)
    # the next command makes a fresh copy of the configuration: a long-lived process (a
    # Temporal host, the MCP server) sees the repository's settings as each job starts
    for key in [k for k in _SHADOWS if k[0] == str(common)]:
        del _SHADOWS[key]


def _quoted(text: str, *, value: bool) -> str:
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    if value:
        out = out.replace("\n", "\\n").replace("\t", "\\t").replace("\b", "\\b")
    return f'"{out}"'


def config_text(entries: Sequence[tuple[str, str | None]]) -> str:
    """A git config file holding ``entries`` (``git config --list`` keys; None: a key written
    without a value, which git reads as true) in order, each under its own section header."""
    lines: list[str] = []
    for key, value in entries:
        section, _, rest = key.partition(".")
        sub, _, name = rest.rpartition(".")
        lines.append(f"[{section} {_quoted(sub, value=False)}]" if sub else f"[{section}]")
        lines.append(f"\t{name}" if value is None else f"\t{name} = {_quoted(value, value=True)}")
    return "".join(f"{line}\n" for line in lines)


def _entries(listing: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for entry in listing.split("\0"):
        if entry:
            key, sep, value = entry.partition("\n")
            out.append((key, value if sep else None))
    return out


def private_entries(listing: str, trusted: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The configuration threadloom's git reads, from ``git config --list --show-scope -z
    --includes`` of the repository: its own (``local``) keys, includes already read in, every
    driver key dropped and the ``trusted`` ones added."""
    parts = listing.split("\0")
    kept: list[tuple[str, str | None]] = []
    for scope, entry in zip(parts[0::2], parts[1::2], strict=False):
        if scope != "local":
            continue
        key, sep, value = entry.partition("\n")
        if _DRIVER_KEY.fullmatch(key) or _NOT_COPIED.fullmatch(key):
            continue
        kept.append((key, value if sep else None))
    return kept + sorted(trusted.items())


def _shadow_root() -> Path:
    if not _SHADOW_ROOT:
        made = Path(tempfile.mkdtemp(prefix="threadloom-git-"))
        atexit.register(shutil.rmtree, made, True)
        _SHADOW_ROOT.append(made)
    return _SHADOW_ROOT[0]


async def _common_of(cwd: Path) -> Path | None:
    """The real common dir of the repository git finds from ``cwd``; None outside one."""
    key = str(real_path(cwd))
    found = _COMMON_OF.get(key)
    if found is None:
        res = await git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=cwd,
                        check=False)  # fmt: skip
        if res.code != 0 or not res.out.strip():
            return None
        found = _COMMON_OF[key] = real_path(Path(res.out.strip()))
    return found


def _link_entries(common: Path, shadow: Path, *, lfs: bool) -> None:
    """Link every entry of ``common`` but its configuration and hooks from ``shadow`` (local
    directory operations: not worth a thread hop). Directories git would create inside
    ``shadow`` (and lose with it) are made in ``common`` first."""
    for name in ("worktrees", "logs", *(("lfs",) if lfs else ())):
        # a repository threadloom may not write (read-only .git): git says so itself when it
        # needs to write there
        with contextlib.suppress(OSError):
            (common / name).mkdir(exist_ok=True)
    names = {p.name for p in common.iterdir()} | set(_LINKED_ALWAYS)
    for name in sorted(names - {"config", "config.worktree", "hooks"}):
        (shadow / name).symlink_to(common / name)


async def private_common_dir(common: Path) -> Path:
    """The common dir threadloom's git is pointed at (``GIT_COMMON_DIR``) for the repository
    whose common dir is ``common``: a private directory holding threadloom's own copy of the
    repository's configuration (its drivers: the trusted ones only) and a link to every other
    entry (objects, refs, packed-refs, worktrees, info, …), so git finds the repository's
    objects and refs where they are and writes them there, but reads its configuration from a
    file no worker can reach through the repository. Made once per process, repository and set
    of trusted drivers; a driver planted in ``.git/config`` (or a file it includes) at any
    moment is never read by threadloom's git."""
    trusted = _TRUSTED.get(str(common), {})
    key = (str(common), tuple(sorted(trusted.items())))
    found = _SHADOWS.get(key)
    if found is not None:
        return found
    listing = await git("config", "--list", "--show-scope", "-z", "--includes", cwd=common,
                        check=False)  # fmt: skip
    if listing.code != 0:
        detail = " ".join(listing.err.split()) or f"exit {listing.code}"
        raise RepoStateError(f"{common}: its git configuration cannot be read: {detail}")
    entries = private_entries(listing.out, trusted)
    shadow = Path(tempfile.mkdtemp(prefix="repo-", dir=_shadow_root()))
    (shadow / "config").write_text(config_text(entries))
    back = await git("config", "--file", str(shadow / "config"), "--list", "-z",
                     cwd=shadow, check=False)  # fmt: skip
    if _entries(back.out) != entries:
        raise RepoStateError(
            f"{common}: threadloom could not copy its git configuration faithfully"
            f" ({' '.join(back.err.split()) or 'the copy reads back differently'})"
        )
    _link_entries(common, shadow, lfs=any(k.startswith("filter.lfs.") for k in trusted))
    # two commands may have made one at once: both are complete, the first one stays
    return _SHADOWS.setdefault(key, shadow)


async def _private_env(args: Sequence[str], cwd: Path, tree: GitTree | None) -> dict[str, str]:
    if not args or args[0] in _NEEDS_NO_DRIVER:
        return {}
    common = tree.common if tree is not None else await _common_of(cwd)
    if common is None:
        return {}
    return {"GIT_COMMON_DIR": str(await private_common_dir(common))}


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def git(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    ok: Sequence[int] = (0,),
    tree: GitTree | None = None,
    input: bytes | None = None,
    timeout: float | None = GIT_TIMEOUT_S,
) -> GitResult:
    """Run ``git ARGS`` in ``cwd``; raise ``WorktreeError`` naming the command when its exit
    code is not in ``ok`` (unless ``check`` is off).

    With ``tree`` (a verified worktree), git is told its git dir and work tree and never looks
    for a ``.git`` file. git runs in a process group of its own: when the call is cancelled or
    runs past ``timeout`` the group (git and anything it started) is killed with SIGKILL and
    reaped before the cancellation (or ``WorktreeError``) goes on."""
    where = tree.flags() if tree is not None else ()
    private = await _private_env(args, cwd, tree)
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            *SAFE_CONFIG,
            *where,
            *args,
            cwd=cwd,
            env=git_env({**(env or {}), **private}),
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as missing:
        raise RepoStateError(
            f"git is not installed (needed by worktree isolation); {NONE_HINT}"
        ) from missing
    try:
        out, err = await asyncio.wait_for(proc.communicate(input), timeout)
    except BaseException as exc:
        _kill_group(proc)
        await asyncio.shield(proc.wait())
        if isinstance(exc, TimeoutError):
            raise WorktreeError(
                f"git {' '.join(args[:3])} in {cwd} ran longer than {timeout:g}s and was killed"
            ) from None
        raise
    res = GitResult(
        proc.returncode or 0, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    )
    if check and res.code not in ok:
        detail = " ".join(res.err.split()) or f"exit {res.code}"
        raise WorktreeError(f"git {' '.join(args[:3])} failed in {cwd}: {detail}")
    return res


def _global_identity() -> dict[str, str]:
    """``user.name``/``user.email`` of the user's global git configuration, read as plain
    values (the file is never loaded by threadloom's git: ``GIT_CONFIG_GLOBAL=/dev/null``)."""
    given = os.environ.get("GIT_CONFIG_GLOBAL")
    home = Path(os.environ.get("HOME") or Path.home())
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    files = [Path(given)] if given else [xdg / "git" / "config", home / ".gitconfig"]
    found: dict[str, str] = {}
    for f in files:
        if not f.is_file():
            continue
        for key in ("user.name", "user.email"):
            res = subprocess.run(
                ["git", "config", "--file", str(f), "--get", key],
                capture_output=True,
                text=True,
                env=git_env(),
                cwd="/",
                check=False,
                timeout=30,
            )
            if res.returncode == 0 and res.stdout.strip():
                found[key] = res.stdout.strip()
    if "user.name" in found and "user.email" in found:
        name, email = found["user.name"], found["user.email"]
        return {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
        }
    return dict(_FALLBACK_IDENTITY)


_identity: dict[str, dict[str, str]] = {}


async def identity_env(root: Path) -> dict[str, str]:
    """The user's git identity for checkpoint and merge commits: the repository's (or the
    environment's), else the global configuration's ``user.name``/``user.email``; when none is
    configured (a fresh machine, CI), a neutral one instead of failing the worker."""
    key = str(root)
    if key not in _identity:
        res = await git("var", "GIT_COMMITTER_IDENT", cwd=root, check=False)
        _identity[key] = {} if res.code == 0 else await asyncio.to_thread(_global_identity)
    return _identity[key]


@dataclass(frozen=True, slots=True)
class GitTree:
    """A worktree threadloom created, with the git dir it verified: git is run with both given
    explicitly, so a ``.git`` file rewritten by a worker cannot send it to another repository."""

    git_dir: Path
    work_tree: Path
    common: Path

    def flags(self) -> tuple[str, ...]:
        return (f"--git-dir={self.git_dir}", f"--work-tree={self.work_tree}")


def real_path(path: Path) -> Path:
    # a local stat or two: not worth a thread hop
    return path.resolve()


async def common_dir(root: Path) -> Path:
    res = await git("rev-parse", "--git-common-dir", cwd=root)
    path = Path(res.out.strip())
    return (path if path.is_absolute() else root / path).resolve()


async def set_ref(root: Path, ref: str, commit: str) -> None:
    await git("update-ref", ref, commit, cwd=root)


async def ref_exists(root: Path, ref: str) -> bool:
    res = await git("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", cwd=root, check=False)
    return res.code == 0


async def resolve_commit(root: Path, ref: str) -> str | None:
    res = await git("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", cwd=root, check=False)
    return res.out.strip() or None


async def update_refs(cwd: Path, lines: str, *, tree: GitTree | None = None) -> None:
    """One ``git update-ref --stdin`` transaction (``lines``: its commands)."""
    await git("update-ref", "--stdin", cwd=cwd, tree=tree, input=lines.encode())
