"""``read_file``: a window of a text file's lines, numbered like ``cat -n``."""

from __future__ import annotations

import os

from pydantic import Field

from ._base import BlockingTool, ToolContext, ToolInput, ToolOutput, display_path, workspace_root
from ._errors import ToolFailure
from ._paths import Guard, open_regular, resolve_in_workspace

DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
"""Longer lines are cut (with a marker): one minified line must not flood the transcript."""
BINARY_SNIFF_BYTES = 8192


class ReadFileInput(ToolInput):
    path: str = Field(description="The file to read, relative to the workspace root.")
    offset: int | None = Field(
        default=None, ge=1, description="1-based line number to start reading from (default 1)."
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        description=f"Maximum number of lines to return (default {DEFAULT_LIMIT}).",
    )


class ReadFileTool(BlockingTool[ReadFileInput]):
    name = "read_file"
    description = (
        "Read a text file in the workspace. Lines are numbered like `cat -n` (line number, tab, "
        f"text). Returns at most `limit` lines (default {DEFAULT_LIMIT}) from `offset` (1-based, "
        "default 1) and says how to read on when the file is longer. Binary files are refused."
    )
    Input = ReadFileInput

    def run_blocking(self, args: ReadFileInput, ctx: ToolContext) -> ToolOutput:
        root = workspace_root(ctx)
        guard = Guard.of(root, ctx.hidden)
        path = resolve_in_workspace(root, args.path, must_exist=True, guard=guard)
        shown_path = display_path(root, path)
        first = args.offset or 1
        last_wanted = first + (args.limit or DEFAULT_LIMIT) - 1
        lines: list[str] = []
        total = 0
        undecodable = False
        with os.fdopen(open_regular(path, root, guard=guard), "rb") as file:
            if b"\x00" in file.read(BINARY_SNIFF_BYTES):
                size = os.fstat(file.fileno()).st_size
                raise ToolFailure(
                    f"{shown_path} looks like a binary file ({size} bytes, contains NUL bytes); "
                    "read_file shows text only"
                )
            file.seek(0)
            for total, raw in enumerate(file, start=1):
                if first <= total <= last_wanted:
                    text, bad = _decode_line(raw)
                    undecodable = undecodable or bad
                    lines.append(f"{total:>6}\t{text}")
        if total == 0:
            return ToolOutput(f"({shown_path} is empty)")
        if first > total:
            raise ToolFailure(
                f"offset {first} is past the end of {shown_path}, which has {total} lines"
            )
        last_shown = first + len(lines) - 1
        notes = []
        if last_shown < total:
            notes.append(
                f"[showing lines {first}-{last_shown} of {total}; call read_file with "
                f"offset={last_shown + 1} to read more]"
            )
        if undecodable:
            notes.append("[note: not valid UTF-8; undecodable bytes are shown as U+FFFD]")
        return ToolOutput("\n".join(lines + notes))


def _decode_line(raw: bytes) -> tuple[str, bool]:
    raw = raw.removesuffix(b"\n").removesuffix(b"\r")
    try:
        text, bad = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, bad = raw.decode("utf-8", "replace"), True
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + f" … [line truncated: {len(text)} characters]"
    return text, bad
