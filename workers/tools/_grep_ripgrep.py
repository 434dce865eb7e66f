"""The ripgrep ``grep`` engine: ``rg --json`` as a subprocess, parsed as a stream.

``--json`` (rather than ``path:line:text`` output) keeps file names with ``:`` or newlines and
non-UTF-8 bytes unambiguous. ``--sort path`` gives tree order, so the first ``cap`` matches can be
kept as they stream in and the rest only counted: memory stays bounded however many lines match.
``--no-mmap`` makes ripgrep check every buffer for NUL bytes, so "binary" means the same as in the
Python engine (any NUL byte in the file). The ripgrep process is killed if the call is cancelled.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._errors import ToolFailure
from ._grep_common import GrepResult, show_line
from ._paths import Guard

LINE_LIMIT = 32 * 1024 * 1024
STDERR_LIMIT = 64 * 1024


class RipgrepUnusable(Exception):
    """ripgrep's output could not be used (a line longer than ``LINE_LIMIT``); use the Python
    engine instead."""


def ripgrep_command(
    rg: str, target_rel: str, pattern: str, glob: str | None, excluded: Sequence[str] = ()
) -> list[str]:
    """``excluded``: workspace-relative paths never searched (threadloom's hidden record)."""
    command = [
        rg,
        "--no-config",
        "--json",
        "--no-mmap",
        "--hidden",
        "--no-ignore",
        "--no-follow",
        "--sort",
        "path",
        "--encoding",
        "none",
    ]
    if glob is not None:
        command += ["--glob", glob]
    # Last, so it wins over the user's glob (later globs take precedence in ripgrep).
    command += ["--glob", "!.git"]
    for rel in excluded:
        command += ["--glob", "!/" + _glob_escape(rel)]
    command += ["--regexp", pattern, "--", target_rel]
    return command


async def grep_ripgrep(
    rg: str,
    root: Path,
    target_rel: str,
    pattern: str,
    glob: str | None,
    *,
    cap: int,
    guard: Guard | None = None,
) -> GrepResult:
    guard = guard or Guard.of(root)
    excluded = [h.relative_to(root).as_posix() for h in guard.hidden if h.is_relative_to(root)]
    proc = await asyncio.create_subprocess_exec(
        *ripgrep_command(rg, target_rel, pattern, glob, excluded),
        cwd=root,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=LINE_LIMIT,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    stderr_task = asyncio.create_task(_read_capped(proc.stderr))
    try:
        result, finished = await _parse(proc.stdout, cap, root, guard)
        code = await proc.wait()
        stderr = await stderr_task
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            while await proc.stdout.read(1 << 20):
                pass  # discard: the pipe must reach EOF before asyncio reports the exit
            await proc.wait()
        stderr_task.cancel()
    if code == 2 and not finished:
        message = stderr.decode("utf-8", "replace")
        # ripgrep's advice to pass --pcre2 or -U is no use to a model that cannot pass flags.
        message = message.split("\nConsider enabling", 1)[0].strip()
        if "regex" in message:
            raise ToolFailure(f"invalid regex {pattern!r}: {message}")
        raise ToolFailure(f"ripgrep failed: {message}")
    return result


async def _parse(
    stream: asyncio.StreamReader, cap: int, root: Path, guard: Guard
) -> tuple[GrepResult, bool]:
    result = GrepResult(cap=cap)
    pending: list[tuple[int, str]] = []
    pending_count = 0
    finished = False
    while True:
        try:
            line = await stream.readline()
        except ValueError as exc:  # a line over LINE_LIMIT
            raise RipgrepUnusable(str(exc)) from exc
        if not line:
            return result, finished
        event = json.loads(line)
        kind = event.get("type")
        data: dict[str, Any] = event.get("data", {})
        if kind == "begin":
            pending, pending_count = [], 0
        elif kind == "match":
            pending_count += 1
            if len(pending) < result.room:
                pending.append((int(data["line_number"]), show_line(_bytes(data["lines"]))))
        elif kind == "end":
            path = _path(data["path"])
            if data.get("binary_offset") is None and pending_count and _shown(root, path, guard):
                result.add_file(path, pending, pending_count)
            pending, pending_count = [], 0
        elif kind == "summary":
            finished = True


def _shown(root: Path, rel: bytes, guard: Guard) -> bool:
    """Not a hard link to a hidden file (the globs exclude hidden paths by name)."""
    if not guard.hidden_ids:
        return True
    try:
        st = os.stat(os.path.join(os.fsencode(root), rel), follow_symlinks=False)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) not in guard.hidden_ids


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]{}!\\" else c for c in text)


def _bytes(value: dict[str, str]) -> bytes:
    if "text" in value:
        return value["text"].encode("utf-8")
    return base64.b64decode(value["bytes"])


def _path(value: dict[str, str]) -> bytes:
    raw = _bytes(value)
    return raw[2:] if raw.startswith(b"./") else raw


async def _read_capped(stream: asyncio.StreamReader) -> bytes:
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < STDERR_LIMIT:
            kept += chunk[: STDERR_LIMIT - len(kept)]
    return bytes(kept)
