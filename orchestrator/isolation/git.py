"""Running git for worktree isolation: every git threadloom runs goes through ``git()``.

It runs ``git`` as a subprocess (``asyncio.create_subprocess_exec``, never a shell) under
configuration threadloom controls: no inherited ``GIT_*`` variable but the identity, no system
or global config (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), and ``-c``
overrides for every setting that names a program (``SAFE_CONFIG``). Filter, merge and diff
drivers (``filter.*.clean|smudge|process|required``, ``merge.*.driver``,
``diff.*.textconv|command``) are the exception, since the user's own (git-lfs) must keep
working: the repository's are recorded when the job starts (``JobBase.drivers``), and before
every command that may run one the configuration is read again (includes followed) and any
driver key not recorded with that value is overridden with ``-c`` — disabled, or set back to
the user's command — so a driver a worker planted in ``.git/config`` never runs. Every git runs
in its own process group, killed and reaped when the call is cancelled or times out.

Errors: ``WorktreeError`` (git failed: exit 1) and its subclass ``RepoStateError`` (the user's
repository cannot be isolated or the request cannot be honoured: exit 2), from
``orchestrator.errors``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
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
``git_env``.) The repository's own configuration is read; a worker without a sandbox can write
to it, so its drivers are checked on every command (``_driver_overrides``), and a worktree's
own ``config.worktree`` is removed before threadloom acts on it."""

GIT_TIMEOUT_S = 600.0

# ----------------------------------------------------------------- drivers the user configured

_DRIVER_KEY = re.compile(
    r"(filter\..+\.(clean|smudge|process|required)|merge\..+\.driver|diff\..+\.(textconv|command))"
)
"""Repository configuration that names a program git runs on file contents (or, ``required``,
makes a filter's absence fatal): ``git config --list`` spells sections and keys in lower case,
subsections as written."""
_DISABLED = {"required": "false", "driver": "false"}
"""What a driver key not in the job's snapshot is set to: empty (git then runs no clean, smudge
or process filter, no textconv or diff command), except ``required`` (false, so the missing
filter is no error) and a merge driver (``false``: git would fail the whole merge on an empty
command; ``false`` makes that file a conflict, nothing else runs)."""
_NEEDS_NO_DRIVER = frozenset(
    {"rev-parse", "update-ref", "commit-tree", "for-each-ref", "check-ref-format", "merge-base",
     "var", "config"}
)  # fmt: skip
"""Commands that never read file contents through a driver: no configuration read first
(``write-tree`` and ``ls-files`` may refresh the index, which runs clean filters)."""

_TRUSTED: dict[str, dict[str, str]] = {}
"""The driver keys each repository had when its job started (``drivers_of``), by the
repository's top level and its common dir. A repository not here trusts no driver at all."""


def parse_drivers(listing: str) -> dict[str, str]:
    """The driver keys of ``git config --list -z`` output (the last value of a key wins)."""
    found: dict[str, str] = {}
    for entry in listing.split("\0"):
        key, _, value = entry.partition("\n")
        if _DRIVER_KEY.fullmatch(key):
            found[key] = value
    return found


def trust_drivers(places: Sequence[Path], drivers: Mapping[str, str]) -> None:
    """Let git run, in the repository at ``places`` (its top level, its common dir), exactly the
    ``drivers`` the user had configured when the job started; every other one is overridden."""
    for place in places:
        _TRUSTED[str(real_path(place))] = dict(drivers)


def _driver_overrides(now: Mapping[str, str], trusted: Mapping[str, str]) -> list[str]:
    """``-c`` pairs so that git runs only the trusted drivers: a key defined since the job
    started is disabled, a user's key changed since is set back to the user's value."""
    out: list[str] = []
    for key, value in now.items():
        if trusted.get(key) == value:
            continue
        if key in trusted:
            out += ["-c", f"{key}={trusted[key]}"]
        else:
            out += ["-c", f"{key}={_DISABLED.get(key.rsplit('.', 1)[1], '')}"]
    return out


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
    drivers: list[str] = []
    if args and args[0] not in _NEEDS_NO_DRIVER:
        # the configuration as this very command will read it (includes followed), so a driver
        # planted in .git/config, an included file or a config.worktree is overridden too
        listing = await git("config", "--list", "-z", cwd=cwd, env=env, tree=tree, check=False)
        place = tree.common if tree is not None else real_path(cwd)
        drivers = _driver_overrides(parse_drivers(listing.out), _TRUSTED.get(str(place), {}))
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            *SAFE_CONFIG,
            *drivers,
            *where,
            *args,
            cwd=cwd,
            env=git_env(env),
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
