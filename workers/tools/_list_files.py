"""``list_files``: the files under a directory, optionally filtered by a glob."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field

from ._base import (
    BlockingTool,
    ToolContext,
    ToolInput,
    ToolOutput,
    display_path,
    printable,
    workspace_root,
)
from ._glob import PathGlob
from ._paths import Guard, link_target_inside, resolve_in_workspace, walk_tree

MAX_ENTRIES = 1000


class ListFilesInput(ToolInput):
    path: str = Field(
        default=".", description="The directory to list, relative to the workspace root."
    )
    pattern: str | None = Field(
        default=None,
        description="A glob matched against paths relative to `path`: `*` and `?` stay within "
        "one directory, `**` spans directories, `{a,b}` alternatives. `*.py` is the top level "
        "only; `**/*.py` is every depth.",
    )


class ListFilesTool(BlockingTool[ListFilesInput]):
    name = "list_files"
    description = (
        "List the files under a directory of the workspace, recursively, as sorted paths "
        "relative to the workspace root (directories are not listed; `.git` is skipped; "
        f"symlinks are listed, not followed). At most {MAX_ENTRIES} paths are returned."
    )
    Input = ListFilesInput

    def run_blocking(self, args: ListFilesInput, ctx: ToolContext) -> ToolOutput:
        root = workspace_root(ctx)
        guard = Guard.of(root, ctx.hidden)
        top = resolve_in_workspace(root, args.path, must_exist=True, guard=guard)
        glob = PathGlob.parse(args.pattern) if args.pattern is not None else None
        files = _files(root, top, glob, guard)
        shown = list(itertools.islice(files, MAX_ENTRIES))
        more = sum(1 for _ in files)
        where = display_path(root, top)
        if not shown:
            if glob is not None:
                return ToolOutput(f"No files under {where} match {glob.pattern!r}")
            return ToolOutput(f"No files under {where}")
        lines = [printable(rel) for rel in shown]
        if more:
            lines.append(f"[{more} more files not shown; narrow the listing with path or pattern]")
        return ToolOutput("\n".join(lines))


def _files(root: Path, top: Path, glob: PathGlob | None, guard: Guard) -> Iterator[str]:
    if not top.is_dir():
        if glob is None or glob.matches(os.fsencode(top.name)):
            yield os.path.relpath(top, root)
        return
    top_rel = os.path.relpath(top, root)
    strip = 0 if top_rel == "." else len(os.fsencode(top_rel)) + 1
    for rel, entry in walk_tree(root, top, guard=guard):
        if entry.is_symlink():
            if not link_target_inside(root, entry.path, guard):
                continue
        elif not entry.is_file(follow_symlinks=False):
            continue
        if glob is not None and not glob.matches(os.fsencode(rel)[strip:]):
            continue
        yield rel
