"""The plain runner's exec helper: the parent of a bash command when there is no sandbox.

Run as a script (``python -I -S _exec_helper.py PARENT_PID PROGRAM ARGS...``), never imported by
threadloom; standard library only, so it starts in a few milliseconds. It is started by threadloom
with the already scrubbed environment, in its own session (so its pid is the command's process
group id), and:

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
import ctypes
import os
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


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


def main() -> None:
    parent = int(sys.argv[1])
    argv = sys.argv[2:]
    signal.signal(signal.SIGTERM, _kill_everything)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # threadloom died before the death signal was armed
        os._exit(137)
    pid = os.fork()
    if pid == 0:
        try:
            for default in (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(default, signal.SIG_DFL)  # Python ignores SIGPIPE/SIGXFSZ
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"bash: failed to start: {exc}\n".encode())
        os._exit(127)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            os._exit(127)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _sweep()  # nothing outlives the command, not even what left its process group
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128)


if __name__ == "__main__":
    main()
