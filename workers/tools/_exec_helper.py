"""The exec helper: the parent of a bash command with the plain runner, and of bubblewrap under
the process-limit supervisor.

Run as a script (``python -I -S _exec_helper.py PARENT_PID LIMIT PROGRAM ARGS...``), never
imported by threadloom; standard library only, so it starts in a few milliseconds. It is started
by threadloom with the already scrubbed environment, in its own session (so its pid is the
command's process group id), and:

- applies the process limit ``LIMIT`` (``_pids``) before the command starts:
  ``cgroup:PATH`` joins the pids cgroup whose ``cgroup.procs`` is PATH (a helper that cannot
  does not run the command: exit 126, saying why); ``nproc:N`` sets RLIMIT_NPROC to N in the
  command; ``supervisor:N`` counts the command's processes and threads (all of them are its
  descendants: it is a subreaper, and a PID namespace's processes descend from bwrap) on a
  thread of its own at real-time priority (``_supervise``), and past N kills every one of them,
  writes why into the output and exits as the shell did (SIGKILL); ``-`` applies none.
  ``supervisor:N:pidns`` (the plain runner's) also starts the command in a PID namespace of its
  own, under a small init (pid 1, this script again) that mounts a ``/proc`` of the namespace in
  a mount namespace of its own: killing that init kills every process of the command at once —
  one by one, a fork bomb that doubles faster than it is killed wins — and the command's
  ``/proc`` shows its own processes only, so ``/proc/$PPID`` is the init's, not a host
  process's;
- is the command's parent, so ``/proc/$PPID/environ`` inside the command shows only the scrubbed
  environment, not threadloom's;
- asks the kernel for SIGTERM when threadloom dies (``PR_SET_PDEATHSIG``; it fires when the
  *thread* that spawned the helper exits, so threadloom spawns it from the event-loop thread) and
  is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every orphaned descendant of the command,
  even one that left the process group with ``setsid``, becomes its child. On threadloom's death
  it SIGKILLs every descendant, again and again until none is left, then exits;
- otherwise waits for the shell, kills whatever the command left behind (in its group or not),
  and exits with the shell's status (a signal death is re-raised on itself,
  so threadloom reads the same status it would read from the shell).
"""

# not `signal`: its enum import doubles the start-up time
import _signal as signal  # type: ignore[import-not-found]
import _thread
import ctypes
import os
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
SUPERVISE_INTERVAL_S = 0.002
"""How often the supervisor looks whether the command may be past the limit (``_supervise``)."""
SUPERVISOR_NICE = -10
"""The helper's priority under the supervisor, where the kernel refuses its thread real-time
priority (``_realtime``): a fork bomb's runnable processes weigh less against it."""


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _kill_everything(*_: object) -> None:
    _sweep()
    os._exit(137)


def _sweep() -> None:
    """SIGKILL every descendant, again until none is left (a subreaper inherits the orphans)."""
    try:  # no child at all means no descendant: orphans are reparented to us
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return
    me = os.getpid()
    while True:
        pids = _descendants(me)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:  # reap whatever is dead (our own children and reparented orphans)
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not pids:  # zombies are listed too, so none listed means none left
            return


def _count(root: int, stop: int) -> int:
    """The processes and threads descending from ``root`` (not ``root`` itself), walked through
    ``/proc/PID/task/TID/children``: the cost is the command's size, not the host's — and no
    more than ``stop``'s: past ``stop`` the walk ends (a fork bomb's thousands are not walked
    while they multiply)."""
    total = 0
    todo = [root]
    while todo and total <= stop:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        if pid != root:
            total += len(tids)
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
            except OSError:
                pass
    return total


def _count_by_scan(root: int, stop: int) -> int:
    """``_count`` for a kernel without ``/proc/PID/task/TID/children``: a walk of all of /proc."""
    total = 0
    for pid in _descendants(root):
        if total > stop:
            break
        try:
            total += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return total


_started: list[int] = []
"""The process this script started (bwrap, the PID namespace's init, or the shell)."""


def _last_pid() -> int:
    """The host's last allocated pid (threads too): between two reads, at least as many tasks
    were made — by the command or anyone — as it grew by. -1 where it cannot be read."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return -1


def _supervise(limit: int) -> None:
    """The supervisor's thread: count, and past ``limit`` kill the whole command (first the
    process this script started — bwrap or an init: its PID namespace goes at once — then
    every descendant). Started before the command: after ``unshare(CLONE_NEWPID)`` no thread
    can be made.

    A count walks the command's processes; between counts the host's last pid is read every
    ``SUPERVISE_INTERVAL_S``: while the last count plus the pids made since stays within the
    limit, the command cannot be past it and is not counted again. So an idle check costs one
    small read, and a fork bomb is counted within an interval of making its first few hundred
    processes."""
    me = os.getpid()
    count = _count if os.path.exists(f"/proc/{me}/task/{me}/children") else _count_by_scan
    _realtime(True)
    while True:
        mark = _last_pid()
        start = time.monotonic()
        held = count(me, limit)
        if held > limit:
            _kill_over_limit(held, limit)
            return
        pause = max(SUPERVISE_INTERVAL_S, 4 * (time.monotonic() - start))
        while True:
            time.sleep(pause)
            now = _last_pid()
            if mark < 0 or now < mark or held + (now - mark) > limit:
                break  # pids enough for the limit were made (or a wrap): count again
            pause = SUPERVISE_INTERVAL_S


def _realtime(on: bool) -> None:
    """This thread (not the process: Linux schedules threads) at the lowest real-time priority,
    or back to normal. A fork bomb's thousands of runnable processes leave a normal thread — even
    at nice -10 — a fraction of a percent of the CPU, and a supervisor that runs once a second
    counts a bomb that has grown tenfold; a real-time thread runs the moment it wakes. It never
    spins (it sleeps between looks, and a count is bounded), and the kernel keeps 5% of every
    second for normal threads whatever real-time ones do. Not allowed (not root): nice only."""
    try:
        if on:
            policy = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
            os.sched_setscheduler(0, policy, os.sched_param(1))
        else:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        pass


def _kill_over_limit(held: int, limit: int) -> None:
    for pid in _started:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _realtime(False)  # what is left is cleaning up, at a normal priority
    note = (
        f"\n[threadloom: the command held more than {limit} processes and threads (counted "
        f"{held}), past the process limit (no pids cgroup here: a supervisor counts); every one "
        "of them was killed]\n"
    )
    try:
        os.write(1, note.encode())
    except OSError:
        pass
    _sweep()


def _apply_limit(spec: str) -> str:
    """The parent's part of the process limit ``spec``; returns an error text, or ""."""
    kind, _, value = spec.partition(":")
    if kind == "cgroup":
        try:
            with open(value, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            return f"cannot join the process-limit cgroup {value}: {exc.strerror or exc}"
    elif kind == "supervisor":
        try:
            os.setpriority(os.PRIO_PROCESS, 0, SUPERVISOR_NICE)
        except OSError:
            pass  # not allowed: the supervisor still runs, at the command's priority
    elif kind not in ("nproc", "-"):
        return f"unknown process limit {spec!r}"
    return ""


def _child_limit(spec: str, nice: int) -> None:
    """In the command's process, before exec: its share of the process limit ``spec``."""
    kind, _, value = spec.partition(":")
    if kind == "nproc":
        import resource

        n = int(value)
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    elif kind == "supervisor":
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)  # back to threadloom's own priority
        except OSError:
            pass


def _exec_command(argv: list[str], limit: str, nice: int) -> None:
    """In the command's process: default signals, its share of the limit, exec."""
    try:
        for default in (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(default, signal.SIG_DFL)  # Python ignores SIGPIPE/SIGXFSZ
        _child_limit(limit, nice)
        os.execvp(argv[0], argv)
    except (OSError, ValueError) as exc:
        os.write(2, f"bash: failed to start: {exc}\n".encode())
    os._exit(127)


def _libc_call(libc: ctypes.CDLL, name: str, *args: object) -> str:
    """A libc call; returns its error text, or "" on success."""
    if getattr(libc, name)(*args) != 0:
        return f"{name}: {os.strerror(ctypes.get_errno())}"
    return ""


def _start_in_pid_namespace(
    libc: ctypes.CDLL, argv: list[str], limit: str, nice: int
) -> tuple[int, int]:
    """The command as pid 2 of a new PID namespace under an init of ours (pid 1); returns the
    init's pid and the read end of the pipe on which it reports the command's wait status."""
    problem = _libc_call(libc, "unshare", CLONE_NEWPID)
    if problem:
        os.write(2, f"bash: not run: no PID namespace for the command ({problem})\n".encode())
        os._exit(126)
    r, w = os.pipe()
    init = os.fork()  # the first child after unshare(CLONE_NEWPID): pid 1 of the namespace
    if init == 0:
        os.close(r)
        _init(libc, argv, limit, nice, w)
    os.close(w)
    return init, r


def _init(libc: ctypes.CDLL, argv: list[str], limit: str, nice: int, report: int) -> None:
    """pid 1 of the command's PID namespace: a private ``/proc``, then the command; reaps every
    orphan; reports the command's status on ``report`` and exits (the kernel then kills
    whatever is left in the namespace)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _libc_call(libc, "prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # the mounts are made private in a mount namespace of the init's own first: a /proc mounted
    # on a shared / would propagate to the host's
    problem = _libc_call(libc, "unshare", CLONE_NEWNS) or _libc_call(
        libc, "mount", b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None
    )
    problem = problem or _libc_call(
        libc,
        "mount",
        b"proc",
        b"/proc",
        b"proc",
        ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC),
        None,
    )
    if problem:
        os.write(
            2, f"bash: not run: no /proc for the command's PID namespace ({problem})\n".encode()
        )
        os._exit(126)
    command = os.fork()
    if command == 0:
        os.close(report)
        _exec_command(argv, limit, nice)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == command:
            os.write(report, str(status).encode())
            os._exit(0)


def main() -> None:
    parent = int(sys.argv[1])
    limit = sys.argv[2]
    argv = sys.argv[3:]
    signal.signal(signal.SIGTERM, _kill_everything)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # threadloom died before the death signal was armed
        os._exit(137)
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    problem = _apply_limit(limit)
    if problem:
        os.write(2, f"bash: not run: {problem}\n".encode())
        os._exit(126)
    if limit.startswith("supervisor:"):
        _thread.start_new_thread(_supervise, (int(limit.split(":")[1]),))
    report = -1
    if limit.endswith(":pidns"):
        pid, report = _start_in_pid_namespace(libc, argv, limit, nice)
    else:
        pid = os.fork()
        if pid == 0:
            _exec_command(argv, limit, nice)
    _started.append(pid)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        # reaped by the supervisor's sweep: it was killed, and that is what we report
        status = signal.SIGKILL if limit.startswith("supervisor:") else 127 << 8
    if report >= 0:  # the init's own status is not the command's: it says that on the pipe
        told = os.read(report, 64)
        status = int(told) if told else signal.SIGKILL
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _sweep()  # nothing outlives the command, not even what left its process group
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if sig != signal.SIGKILL:  # SIGKILL has no handler to reset (EINVAL)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128)


if __name__ == "__main__":
    main()
