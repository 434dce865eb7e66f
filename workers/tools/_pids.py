"""The process limit of ``bash``: a command never holds more than ``PIDS_MAX`` processes.

Every command — under bubblewrap or with the plain runner — gets one, chosen once per threadloom
process (``process_limit()``), the strongest this host allows:

1. ``cgroup``: a pids cgroup, ``threadloom/run-<pid>`` with ``pids.max`` = ``PIDS_MAX``, under
   a cgroup hierarchy found in ``/proc/self/mounts``: a cgroup v2 mount whose controllers
   include ``pids`` (the pids controller is enabled for the children on the way down), else a
   cgroup v1 mount of the ``pids`` controller (hosts and container runtimes still on v1, or a
   hybrid layout whose ``/sys/fs/cgroup/unified`` has no controllers). It takes write access to
   the hierarchy (root, normally). Each command joins it before it starts anything; the kernel
   then refuses the fork past the limit (EAGAIN), counting processes and threads across all the
   commands of this threadloom process. The group is removed at exit.
2. ``nproc``: not root and no cgroup — ``RLIMIT_NPROC`` at what the uid runs now plus
   ``PIDS_MAX``: the kernel refuses the fork past it (it counts per uid across the host).
3. ``supervisor``: root and no usable cgroup (a read-only ``/sys/fs/cgroup`` in a container, a v2
   root whose controllers cannot be enabled for children, ``THREADLOOM_CGROUP=none``).
   ``RLIMIT_NPROC`` binds no process of uid 0, not even in a user namespace mapped to it, so a
   supervisor counts instead: the exec helper (``_exec_helper``), the command's parent and a
   child subreaper — so every process the command starts stays its descendant, ``setsid`` and
   double forks included — counts the command's processes and threads (looking every 2 ms
   whether enough pids were made since its last count to need another) and kills all of them
   once there are more than ``PIDS_MAX``, writing why into the output. The kill must be whole
   at once: killed one by one, a fork bomb that doubles faster than the kills wins (a bash fork
   bomb did, taking the host's load past 3,000).
   Under bubblewrap the command is in a PID namespace already (killing bwrap ends it); the
   plain runner's command gets one of its own from the helper (probed once, ``pidns_refused``:
   root can make one unless a container's seccomp profile or missing ``CAP_SYS_ADMIN`` refuse
   it). Looser than the kernel's refusal even so — a command can go past the limit for an
   interval before it dies, and the limit holds per command, not across commands — so it is
   said once per job (a ``bash.process_limit`` warning), which also says when the plain runner
   has no PID namespace and a fast fork bomb can outrun the supervisor.

No command runs without one of the three: where the supervisor cannot count (no ``/proc``) the
command is refused (``ProcessLimitUnavailable``).

``THREADLOOM_CGROUP``: ``auto`` (the default) finds a cgroup as above; ``none`` makes none, as on
a host where none is usable (for a user who does not want threadloom creating cgroups, and for
the tests of the other two ways).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PIDS_MAX = 512
"""At most this many processes and threads at once: across all of one threadloom process's
commands under a pids cgroup; per uid (plus what it already runs) under RLIMIT_NPROC; per command
under the supervisor."""
CGROUP_ENV = "THREADLOOM_CGROUP"
CGROUP_CHOICES = ("auto", "none")
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_exec_helper.py")
"""The exec helper script (run by ``helper_argv``, never imported)."""


def helper_argv(limit: str) -> list[str]:
    """The exec helper's command line before the command's: this process as the parent it
    dies with, ``limit`` as the process limit it applies (``ProcessLimit.helper_arg``)."""
    return [sys.executable, "-I", "-S", HELPER, str(os.getpid()), limit]


How = Literal["cgroup", "nproc", "supervisor"]


class ProcessLimitUnavailable(Exception):
    """No process limit can be applied to a command here: it is not run."""


@dataclass(frozen=True, slots=True)
class ProcessLimit:
    """How this process's commands are limited (see the module docstring)."""

    how: How
    limit: int
    group: Path | None = None
    """The pids cgroup (``how == "cgroup"``)."""
    version: int | None = None
    """The cgroup version of ``group``: 1 or 2."""
    reason: str = ""
    """Why no cgroup is used (``how != "cgroup"``)."""
    pidns_refused: str = ""
    """Under the supervisor: "" when the plain runner can give a command a PID namespace of
    its own, else why it cannot."""

    def helper_arg(self, *, plain: bool) -> str:
        """How the exec helper applies it (``_exec_helper``'s second argument); ``plain``: it
        runs the command itself (not bwrap, which has a PID namespace already)."""
        if self.how == "cgroup":
            assert self.group is not None
            return f"cgroup:{self.group / 'cgroup.procs'}"
        if self.how == "supervisor" and plain and not self.pidns_refused:
            return f"supervisor:{self.limit}:pidns"
        return f"{self.how}:{self.limit}"

    def describe(self) -> str:
        if self.how == "cgroup":
            return f"a pids cgroup v{self.version} ({self.group}, pids.max {self.limit})"
        if self.how == "nproc":
            return f"RLIMIT_NPROC {self.limit} (no pids cgroup: {self.reason})"
        text = (
            f"a supervisor that kills a command past {self.limit} processes and threads "
            f"(no pids cgroup: {self.reason})"
        )
        if self.pidns_refused:
            text += (
                "; the plain runner gets no PID namespace here, so its commands are killed"
                f" one by one and a fast fork bomb can outrun it ({self.pidns_refused})"
            )
        return text


def process_limit() -> ProcessLimit:
    """The process limit for the next command (made once per process and setting of
    ``THREADLOOM_CGROUP``; a cgroup that disappeared is made again). Raises
    ``ProcessLimitUnavailable`` where none can be applied."""
    choice = os.environ.get(CGROUP_ENV) or "auto"
    if choice not in CGROUP_CHOICES:
        raise ProcessLimitUnavailable(
            f"{CGROUP_ENV}={choice!r} is not one of {', '.join(CGROUP_CHOICES)}"
        )
    found = _chosen(choice)
    if found.group is not None and not found.group.is_dir():
        _chosen.cache_clear()
        found = _chosen(choice)
    if found.how == "nproc":  # counted afresh: what the uid runs changes
        return ProcessLimit("nproc", nproc_limit(), reason=found.reason)
    if found.how == "supervisor" and not os.path.isdir(f"/proc/{os.getpid()}/task"):
        raise ProcessLimitUnavailable(
            f"no pids cgroup ({found.reason}), and no /proc to count a command's processes in"
        )
    return found


@functools.cache
def _chosen(choice: str) -> ProcessLimit:
    reason = f"{CGROUP_ENV}=none"
    if choice == "auto":
        group, reason = _make_cgroup()
        if group is not None:
            return group
    if os.geteuid() != 0:
        return ProcessLimit("nproc", nproc_limit(), reason=reason)
    return ProcessLimit("supervisor", PIDS_MAX, reason=reason, pidns_refused=_probe_pidns())


def _probe_pidns() -> str:
    """Whether the helper can run a command in a PID namespace of its own here: "" if it can,
    else its one-line reason (the helper, run once on ``true``)."""
    try:
        done = subprocess.run(
            [*helper_argv(f"supervisor:{PIDS_MAX}:pidns"), "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1]


# --- cgroups --------------------------------------------------------------------------------


def cgroup_hierarchies(mounts: str) -> list[tuple[int, Path]]:
    """The hierarchies a pids cgroup can be made in, from ``/proc/self/mounts`` text: every
    cgroup2 mount (v2 first), then every cgroup v1 mount of the ``pids`` controller."""
    v2: list[tuple[int, Path]] = []
    v1: list[tuple[int, Path]] = []
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        where = Path(fields[1].replace("\\040", " "))
        if fields[2] == "cgroup2":
            v2.append((2, where))
        elif fields[2] == "cgroup" and "pids" in fields[3].split(","):
            v1.append((1, where))
    return v2 + v1


def _make_cgroup() -> tuple[ProcessLimit | None, str]:
    """The pids cgroup of this process, made now, or (None, why not)."""
    try:
        with open("/proc/self/mounts") as f:
            mounts = f.read()
    except OSError as exc:
        return None, f"cannot read /proc/self/mounts ({exc.strerror})"
    found = cgroup_hierarchies(mounts)
    if not found:
        return None, "no cgroup v2 or v1 pids hierarchy is mounted"
    problems = []
    for version, root in found:
        try:
            group = make_group(root, version=version)
        except OSError as exc:
            problems.append(f"{root}: {exc.strerror or exc}")
            continue
        except _NoPids as exc:
            problems.append(f"{root}: {exc}")
            continue
        atexit.register(_remove_cgroup, group)
        return ProcessLimit("cgroup", PIDS_MAX, group=group, version=version), ""
    return None, "; ".join(problems)


class _NoPids(Exception):
    """A v2 hierarchy without the pids controller."""


def make_group(root: Path, *, version: int, limit: int = PIDS_MAX) -> Path:
    """``root/threadloom/run-<pid>`` with ``pids.max`` = ``limit``, under the cgroup hierarchy
    mounted at ``root`` (v2: the pids controller enabled for the children of ``root`` and of
    ``threadloom``); stale groups of dead processes removed on the way. Raises OSError where it
    cannot be made (no write access, a v2 root with processes of its own)."""
    if version == 2:
        if "pids" not in (root / "cgroup.controllers").read_text().split():
            raise _NoPids("the pids controller is not available in this hierarchy")
        _enable_pids(root)
    parent = root / "threadloom"
    parent.mkdir(exist_ok=True)
    if version == 2:
        _enable_pids(parent)
    _reap_stale(parent)
    group = parent / f"run-{os.getpid()}"
    group.mkdir(exist_ok=True)
    (group / "pids.max").write_text(str(limit))
    if int((group / "pids.max").read_text().strip()) != limit:
        raise OSError(f"{group / 'pids.max'} does not hold {limit}")
    return group


def _enable_pids(cgroup: Path) -> None:
    control = cgroup / "cgroup.subtree_control"
    if "pids" not in control.read_text().split():
        control.write_text("+pids")


def _reap_stale(parent: Path) -> None:
    for child in parent.glob("run-*"):
        with contextlib.suppress(ValueError, OSError):
            pid = int(child.name[4:])
            if not Path(f"/proc/{pid}").exists():
                child.rmdir()  # fails while a process is still in it: then it stays


def _remove_cgroup(group: Path) -> None:
    with contextlib.suppress(OSError):
        group.rmdir()


# --- RLIMIT_NPROC -----------------------------------------------------------------------------


def nproc_limit() -> int:
    """Not root and no pids cgroup: RLIMIT_NPROC for a command, which the kernel counts per real
    uid across the whole host, so it is what this uid already runs plus ``PIDS_MAX`` (never
    above the current hard limit)."""
    uid = os.getuid()
    count = 0
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(f"/proc/{name}").st_uid == uid:
                        count += 1
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    want = count + PIDS_MAX
    return want if hard == resource.RLIM_INFINITY else min(want, hard)
