"""``edit_file``: replace exact text in a file; refuses ambiguous or missing matches."""

from __future__ import annotations

import os

from pydantic import Field

from store import Change, Effects

from ._base import BlockingTool, ToolContext, ToolInput, ToolOutput, display_path, workspace_root
from ._changes import note_write
from ._errors import ToolFailure
from ._paths import Guard, open_regular, replace_contents, resolve_in_workspace

MAX_EDIT_BYTES = 64 * 1024 * 1024
"""A file is edited in memory; larger ones are refused rather than risking the worker."""


class EditFileInput(ToolInput):
    path: str = Field(description="The file to edit, relative to the workspace root.")
    old: str = Field(
        min_length=1,
        description="The exact text to replace, including whitespace and indentation. It must "
        "occur exactly once unless replace_all is true.",
    )
    new: str = Field(description="The replacement text.")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence of old instead of exactly one."
    )


class EditFileTool(BlockingTool[EditFileInput]):
    name = "edit_file"
    description = (
        "Edit a text file by exact string replacement: `old` (copied exactly from the file, "
        "indentation included) becomes `new`. Fails when `old` is not found, or when it occurs "
        "more than once and replace_all is false: then include more surrounding lines."
    )
    Input = EditFileInput

    def run_blocking(self, args: EditFileInput, ctx: ToolContext) -> ToolOutput:
        root = workspace_root(ctx)
        guard = Guard.of(root, ctx.hidden)
        path = resolve_in_workspace(root, args.path, must_exist=True, for_write=True, guard=guard)
        shown = display_path(root, path)
        with os.fdopen(open_regular(path, root, guard=guard), "rb") as file:
            data = file.read(MAX_EDIT_BYTES + 1)
        if len(data) > MAX_EDIT_BYTES:
            raise ToolFailure(f"{shown} is larger than {MAX_EDIT_BYTES} bytes; edit it with bash")
        if b"\x00" in data:
            raise ToolFailure(f"{shown} looks like a binary file (contains NUL bytes)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolFailure(
                f"{shown} is not valid UTF-8 ({exc.reason} at byte {exc.start}); edit_file edits "
                "UTF-8 text only"
            ) from None
        if args.old == args.new:
            raise ToolFailure("old and new are identical: there is nothing to change")
        old, new = args.old, args.new
        count = text.count(old)
        crlf = False
        if count == 0 and "\n" in old and "\r\n" not in old and "\r\n" in text:
            # read_file shows lines without their "\r": accept text copied from it.
            crlf_old = old.replace("\n", "\r\n")
            count = text.count(crlf_old)
            if count:
                old, new, crlf = crlf_old, new.replace("\n", "\r\n"), True
        if count == 0:
            raise ToolFailure(
                f"old text not found in {shown}. It must match the file exactly, whitespace and "
                "indentation included; read the file and copy the text from it"
            )
        if count > 1 and not args.replace_all:
            raise ToolFailure(
                f"old text occurs {count} times in {shown}; include more surrounding lines so it "
                "matches exactly once, or set replace_all=true to replace every occurrence"
            )
        replaced = text.replace(old, new) if args.replace_all else text.replace(old, new, 1)
        fd = open_regular(path, root, write=True, guard=guard)
        replace_contents(fd, replaced.encode("utf-8"), root, path)
        note_write(root)
        done = count if args.replace_all else 1
        text_out = f"Replaced {done} occurrence{'s' if done != 1 else ''} in {shown}"
        if crlf:
            text_out += " (matched with the file's CRLF line endings)"
        return ToolOutput(
            text_out, effects=Effects(changed=[Change(path=shown, action="modified")])
        )
