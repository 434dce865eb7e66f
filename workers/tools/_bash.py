"""``bash``: run a shell command in the workspace, in its own process group, and clean up after it.

The contract:

- ``bash -c COMMAND`` with cwd = the workspace, stdin from ``/dev/null``, stdout and stderr merged
  into one stream, in a new session (so its process group is its own and can be killed whole).
- The environment is ``os.environ`` plus ``ctx.env``, minus every variable whose name contains
  KEY, SECRET, TOKEN or PASSWORD (any case), whose value contains a configured secret, or whose
  value holds a credential URL: the model must not see or exfiltrate credentials.
- Without bubblewrap (the plain runner) the shell's parent is a small exec helper
  (``_exec_helper``) started with that scrubbed environment, so ``/proc/$PPID/environ`` is not
  threadloom's; it leads the process group, dies with threadloom (``PR_SET_PDEATHSIG``) and, as a
  child subreaper, kills every descendant of the command first. threadloom makes itself
  non-dumpable (against same-uid readers of its /proc files; root is not stopped by this), and
  the ``threadloom`` command took its secrets out of its own start-up environment
  (``workers.take_secrets``), so root reading ``/proc/<threadloom>/environ`` finds none either.
- Nothing outlives the command: when the shell exits, whatever it left running in its process
  group is killed (this also keeps a background child holding the output pipe from hanging us).
  On timeout the whole group is killed and an error result returns promptly with the output so
  far; on cancellation the group is killed and ``CancelledError`` propagates.
- The output is read as a stream and kept whole: in memory up to ``SPILL_BYTES`` (4 MiB), then in
  an anonymous temporary file (``store.OutputFile``, returned as a ``SpooledOutput`` that the loop
  streams into the store, so memory stays bounded whatever the size), up to ``output_cap_bytes``
  (``store.MAX_OUTPUT_BYTES``, 4 GiB); beyond that cap the first bytes and the last
  ``TAIL_KEEP`` (1 MiB) are kept around a marker giving the omitted size (a cap at or below
  ``SPILL_BYTES`` keeps half and half in memory). Capping what the model sees is the loop's job,
  not this tool's. The result ends with ``[exit code: N]``; a non-zero exit
  is a normal result (the model reads the code), ``is_error`` is for timeouts and failures to start.
- The result carries ``Effects`` (never shown to the model): the exit status (None when the
  command did not exit on its own) and the workspace paths it added, modified or deleted, from a
  stat snapshot of the workspace before it starts and one after it ends (``_changes``).

The shell's exit is detected with ``waitid(WNOWAIT)`` on a helper thread, not by asyncio's
subprocess machinery: on Python 3.11 ``Process.wait()`` also waits for the output pipe to close,
which a background grandchild can hold open indefinitely. ``WNOWAIT`` leaves the shell a zombie
until the group has been killed, so its pid (= the group id) cannot be reused in between.

With ``ctx.sandbox`` ``auto`` (bubblewrap available) or ``required``, the shell runs under
bubblewrap (``_sandbox``): bwrap leads the process group, and its PID namespace dies with it.
``required`` without a working bubblewrap answers an error result and runs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Mapping

from pydantic import Field

from store import MAX_OUTPUT_BYTES, Effects, OutputFile

from .._secrets import secret_variables, taken_secrets
from ._base import Tool, ToolContext, ToolInput, ToolOutput
from ._changes import changed_paths, close_window, open_window, take_snapshot
from ._pids import ProcessLimitUnavailable, helper_argv, process_limit
from ._sandbox import bwrap_argv, sandbox_status

MAX_TIMEOUT_S = 600.0
DEFAULT_OUTPUT_CAP = MAX_OUTPUT_BYTES
SPILL_BYTES = 4 << 20
"""Output past this many bytes goes to a temporary file instead of memory."""
TAIL_KEEP = 1 << 20
"""Of an output beyond the cap (spilled to a file), the last bytes kept after the marker."""
DRAIN_GRACE_S = 2.0
"""After the group is killed, how long to wait for the pipe to reach EOF: only a process that
left the group (``setsid``) can hold it open longer, and we stop reading rather than wait on it."""
_READ_SIZE = 1 << 20
PR_SET_DUMPABLE = 4
_undumpable = False


def _make_undumpable() -> None:
    """Make threadloom's own /proc/PID/environ, mem… unreadable to other same-uid processes
    (``PR_SET_DUMPABLE`` 0). This does not stop root: root reads any process's /proc files."""
    global _undumpable
    if _undumpable:
        return
    _undumpable = True
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class BashInput(ToolInput):
    command: str = Field(min_length=1, description="The bash command line to run.")
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_S,
        description=f"Seconds before the command is killed (default 120, at most "
        f"{MAX_TIMEOUT_S:g}).",
    )


class BashTool(Tool[BashInput]):
    name = "bash"
    description = (
        "Run a bash command with the workspace as the working directory; stdout and stderr are "
        "returned merged, followed by `[exit code: N]`. stdin is empty (no interactive "
        "programs). On timeout (default 120 s) the command and everything it started are "
        "killed. Background processes do not survive the command. Secrets (variables named "
        "*KEY*, *SECRET*, *TOKEN*, *PASSWORD*) are not in the environment."
    )
    Input = BashInput

    def __init__(self, *, output_cap_bytes: int = DEFAULT_OUTPUT_CAP) -> None:
        self.output_cap_bytes = output_cap_bytes

    async def run(self, args: BashInput, ctx: ToolContext) -> ToolOutput:
        """Run the command; the output carries its ``Effects``: the exit status and the
        workspace paths it changed (``_changes``: a snapshot before it starts, one after it
        ends)."""
        window = open_window(ctx.workspace)
        try:
            before = await asyncio.to_thread(take_snapshot, ctx.workspace, hidden=ctx.hidden)
            out, code = await self._run(args, ctx)
            after = await asyncio.to_thread(take_snapshot, ctx.workspace, hidden=ctx.hidden)
        finally:
            close_window(window)
        effects = Effects(
            exit_code=code,
            changed=changed_paths(before, after),
            complete=before.complete and after.complete,
            concurrent=window.concurrent,
        )
        return (
            out.with_effects(effects)
            if isinstance(out, SpooledOutput)
            else (ToolOutput(out.text, is_error=out.is_error, effects=effects))
        )

    async def _run(self, args: BashInput, ctx: ToolContext) -> tuple[ToolOutput, int | None]:
        """The command's output, and its exit status (None: it did not exit on its own)."""
        timeout = min(args.timeout_s or ctx.default_timeout_s, MAX_TIMEOUT_S)
        argv = ["bash", "-c", args.command]
        env = scrubbed_environment(os.environ, ctx.env)
        try:
            limit = process_limit()
        except ProcessLimitUnavailable as exc:
            return ToolOutput(
                f"bash: not run: no process limit can be applied: {exc}", is_error=True
            ), None
        sandboxed = False
        if ctx.sandbox != "none":
            status = sandbox_status()
            if status.available:
                argv = bwrap_argv(
                    status.program,
                    argv,
                    workspace=ctx.workspace,
                    limit=limit,
                    network=ctx.network,
                    hidden=ctx.hidden,
                )
                env["TMPDIR"] = "/tmp"  # the sandbox's private /tmp; elsewhere is read-only
                sandboxed = True
            elif ctx.sandbox == "required":
                return ToolOutput(
                    f"bash: not run: the job requires the sandbox and {status.reason}",
                    is_error=True,
                ), None
        if not sandboxed:
            # The plain runner: the command's parent is the exec helper, not threadloom; it
            # applies the process limit itself.
            _make_undumpable()
            argv = [*helper_argv(limit.helper_arg(plain=True)), *argv]
        elif limit.how == "supervisor":
            # bwrap's wrapper applies a cgroup or RLIMIT_NPROC; the supervisor is the helper
            argv = [*helper_argv(limit.helper_arg(plain=False)), *argv]
        try:
            # Popen, not asyncio's subprocess: see the module docstring. Spawning is quick (vfork).
            # Called on the event-loop thread: the helper's PR_SET_PDEATHSIG follows this thread.
            proc = subprocess.Popen(  # noqa: ASYNC220
                argv,
                cwd=ctx.workspace,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        except OSError as exc:
            return ToolOutput(f"bash: failed to start: {exc}", is_error=True), None
        try:
            run = _Run(proc, OutputBuffer(self.output_cap_bytes))
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            raise
        try:
            timed_out = False
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(run.exited)
            except TimeoutError:
                timed_out = True
            run.kill_group()  # on timeout: everything; after a normal exit: what was left behind
            code = await run.finish()
        except BaseException:
            run.abandon()
            raise
        if timed_out:
            footer = f"\n[timed out after {timeout:g} s; the command's process group was killed]"
            return run.output.result(footer, is_error=True), None
        return run.output.result(f"\n[exit code: {_describe_exit(code)}]"), code


def scrubbed_environment(
    base: Mapping[str, str], extra: Mapping[str, str] | None
) -> dict[str, str]:
    """``base`` + ``extra`` without any variable whose name looks like it holds a credential,
    whose value holds a credential URL (``scheme://user:password@…``, e.g.
    ``THREADLOOM_DB=postgresql://u:pw@host/db``), or whose value contains a secret — of these
    or of those the command took out of the environment at start (``store.secret_variables``,
    the one rule)."""
    merged = {**base, **(extra or {})}
    drop = secret_variables({**taken_secrets(), **merged})
    return {name: value for name, value in merged.items() if name not in drop}


def _describe_exit(code: int) -> str:
    if code >= 0:
        return str(code)
    try:
        return f"{code} (killed by {signal.Signals(-code).name})"
    except ValueError:
        return str(code)


class SpooledOutput(ToolOutput):
    """A ``ToolOutput`` whose text is in ``file`` rather than in memory. The loop streams the
    file into the store (``Store.append(output_files=…)``) and closes it; ``text`` reads it whole,
    for callers that want the string and can afford it."""

    file: OutputFile

    def __init__(
        self, file: OutputFile, *, is_error: bool = False, effects: Effects | None = None
    ) -> None:
        object.__setattr__(self, "file", file)
        object.__setattr__(self, "is_error", is_error)
        object.__setattr__(self, "effects", effects)

    def with_effects(self, effects: Effects) -> SpooledOutput:
        return SpooledOutput(self.file, is_error=self.is_error, effects=effects)

    @property
    def text(self) -> str:
        return b"".join(self.file.chunks()).decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"SpooledOutput({self.file!r}, is_error={self.is_error}, effects={self.effects!r})"

    __eq__ = object.__eq__
    __hash__ = object.__hash__


class OutputBuffer:
    """The command's output: in memory up to ``spill`` bytes, then in a temporary file, whole up
    to ``cap`` bytes; beyond the cap, its head and ``TAIL_KEEP`` bytes of tail (the first and last
    halves when ``cap`` is at most ``spill``: then it never leaves memory)."""

    def __init__(self, cap: int, *, spill: int = SPILL_BYTES) -> None:
        self.cap = cap
        self.spill = spill if cap > spill else None
        self.file: OutputFile | None = None
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0
        self.overflowed = False
        self.last = b""

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        self.last = data[-1:]
        if self.file is not None:
            self._feed_file(data)
            return
        if not self.overflowed:
            if self.spill is not None and len(self.head) + len(data) > self.spill:
                self.file = OutputFile()
                self.file.write(bytes(self.head))
                self.head = bytearray()
                self._feed_file(data)
                return
            if len(self.head) + len(data) <= self.cap:
                self.head += data
                return
            self.overflowed = True
            keep = self.cap // 2
            room = keep - len(self.head)
            if room >= 0:
                self.head += data[:room]
                data = data[room:]
            else:
                data = bytes(self.head[keep:]) + data
                del self.head[keep:]
        self.tail.append(data)
        self.tail_size += len(data)
        tail_cap = self.cap - self.cap // 2
        while self.tail and self.tail_size - len(self.tail[0]) >= tail_cap:
            self.tail_size -= len(self.tail.popleft())

    def _feed_file(self, data: bytes) -> None:
        assert self.file is not None
        room = self.cap - min(TAIL_KEEP, self.cap // 2) - self.file.size
        if room > 0 and not self.tail:
            self.file.write(data[:room])
            data = data[room:]
        if data:
            self.tail.append(data)
            self.tail_size += len(data)
            keep = min(TAIL_KEEP, self.cap // 2)
            while self.tail and self.tail_size - len(self.tail[0]) >= keep:
                self.tail_size -= len(self.tail.popleft())

    def result(self, footer: str, *, is_error: bool = False) -> ToolOutput:
        """The output followed by ``footer``: a ``ToolOutput``, or a ``SpooledOutput`` once it
        went to a file."""
        if self.file is None:
            return ToolOutput(self.text(footer), is_error=is_error)
        tail = b"".join(self.tail)
        self.tail.clear()
        keep = min(TAIL_KEEP, self.cap // 2)
        if self.total > self.cap:
            tail = tail[len(tail) - keep :] if len(tail) > keep else tail
            omitted = self.total - self.file.size - len(tail)
            self.file.write(f"\n[… {omitted} bytes of output omitted …]\n".encode())
        self.file.write(tail)
        self.file.write((footer if self.last != b"\n" else footer.lstrip("\n")).encode())
        file, self.file = self.file, None
        return SpooledOutput(file, is_error=is_error)

    def text(self, footer: str) -> str:
        """The output as text followed by ``footer``. Decoded once, from one buffer: the output
        may be tens of MB and should not be copied more than needed."""
        if self.overflowed:
            tail = b"".join(self.tail)
            tail = tail[len(tail) - (self.cap - self.cap // 2) :] if tail else tail
            omitted = self.total - len(self.head) - len(tail)
            self.head += f"\n[… {omitted} bytes of output omitted …]\n".encode()
            self.head += tail
            self.tail.clear()
        if not self.head:
            self.head += b"(no output)"
        elif not self.head.endswith(b"\n"):
            footer = "\n" + footer.lstrip("\n")
        else:
            footer = footer.lstrip("\n")
        self.head += footer.encode()
        text = self.head.decode("utf-8", "replace")
        self.head = bytearray()
        return text


class _Run:
    """One running shell: its output reader, its exit watcher, and the kill switch."""

    def __init__(self, proc: subprocess.Popen[bytes], output: OutputBuffer) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: the shell leads its own group
        self.output = output
        self.loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = self.loop.create_future()
        self.eof: asyncio.Future[None] = self.loop.create_future()
        self.abandoned = False
        self.fd = proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        _grow_pipe(self.fd)
        self.loop.add_reader(self.fd, self._on_readable)
        threading.Thread(target=self._watch_exit, name=f"bash-{proc.pid}", daemon=True).start()

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self.fd, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self.output.feed(chunk)
            return
        self._close_pipe()

    def _close_pipe(self) -> None:
        if not self.eof.done():
            self.eof.set_result(None)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self.loop.remove_reader(self.fd)
            self.proc.stdout.close()

    def _watch_exit(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
        try:
            self.loop.call_soon_threadsafe(self._on_exit)
        except RuntimeError:  # the loop is closed: nobody will reap it but us
            self.kill_group()
            self.proc.wait()

    def _on_exit(self) -> None:
        if self.abandoned:
            self.kill_group()
            self.proc.wait()
        elif not self.exited.done():
            self.exited.set_result(None)

    def kill_group(self) -> None:
        # The shell is not reaped before this is called, so the group id is still ours.
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)

    async def finish(self) -> int:
        """After the group was killed: reap the shell and read the pipe to its end (bounded)."""
        await asyncio.shield(self.exited)
        code = self.proc.wait()  # a zombie by now: returns at once
        if not self.eof.done():
            try:
                async with asyncio.timeout(DRAIN_GRACE_S):
                    await asyncio.shield(self.eof)
            except TimeoutError:
                self.output.feed(
                    b"\n[stopped reading: the output pipe is held open by a process that left "
                    b"the command's process group]\n"
                )
        self._close_pipe()
        return code

    def abandon(self) -> None:
        """Cancelled: kill the group now; the exit watcher reaps the shell when it is gone."""
        self.abandoned = True
        self.kill_group()
        self._close_pipe()
        if self.exited.done() and self.proc.returncode is None:  # exited, not yet reaped
            self.proc.wait()


def _grow_pipe(fd: int) -> None:
    """Fewer, larger reads for big outputs (Linux only; best effort)."""
    try:
        import fcntl

        set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
        if set_size is not None:
            fcntl.fcntl(fd, set_size, _READ_SIZE)
    except OSError:
        pass
