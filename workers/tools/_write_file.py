"""``write_file``: create or overwrite a file with the given text."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from store import Change, Effects

from ._base import BlockingTool, ToolContext, ToolInput, ToolOutput, display_path, workspace_root
from ._changes import note_write
from ._errors import ToolFailure
from ._paths import (
    Guard,
    make_parent_dirs,
    open_regular,
    replace_contents,
    resolve_in_workspace,
)


class WriteFileInput(ToolInput):
    path: str = Field(
        description="The file to write, relative to the workspace root. Missing parent "
        "directories are created."
    )
    content: str = Field(description="The complete new contents of the file (UTF-8 text).")


class WriteFileTool(BlockingTool[WriteFileInput]):
    name = "write_file"
    description = (
        "Write a text file in the workspace: creates it (and its missing parent directories) or "
        "replaces its whole contents. To change part of an existing file, prefer edit_file."
    )
    Input = WriteFileInput

    def run_blocking(self, args: WriteFileInput, ctx: ToolContext) -> ToolOutput:
        root = workspace_root(ctx)
        if args.path.endswith("/"):
            raise ToolFailure(f"{args.path!r} ends with '/': give the path of a file")
        guard = Guard.of(root, ctx.hidden)
        path = resolve_in_workspace(root, args.path, must_exist=False, for_write=True, guard=guard)
        shown = display_path(root, path)
        if path.is_dir():
            raise ToolFailure(f"{shown} is a directory")
        new_dirs = make_parent_dirs(root, path)
        data = args.content.encode("utf-8")
        try:
            fd = open_regular(path, root, write=True, create=True, exclusive=True, guard=guard)
            created = True
        except FileExistsError:
            fd = open_regular(path, root, write=True, guard=guard)
            created = False
        replace_contents(fd, data, root, path)
        note_write(root)
        verb = "Created" if created else "Overwrote"
        text = f"{verb} {shown} ({len(data)} bytes)"
        if new_dirs:
            text += "; created directories: " + ", ".join(display_path(root, d) for d in new_dirs)
        action: Literal["added", "modified"] = "added" if created else "modified"
        return ToolOutput(text, effects=Effects(changed=[Change(path=shown, action=action)]))
