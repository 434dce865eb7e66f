"""``grep``: regex search over the workspace's files, by ripgrep when installed, else Python.

Both engines give identical results (a test runs both on the same tree): lines
``path:line:text`` with the path relative to the workspace, sorted by path (tree order) then line
number, hidden files searched, nothing ignored except ``.git`` and threadloom's own record (the
``Guard``'s hidden paths, by name and by inode), symlinks never followed, binary files skipped,
at most ``MAX_MATCHES`` shown with a count of the rest.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Literal

from pydantic import Field

from ._base import Tool, ToolContext, ToolInput, ToolOutput, display_path, printable, workspace_root
from ._errors import ToolFailure
from ._glob import OverrideGlob
from ._grep_common import MAX_MATCHES, GrepResult
from ._grep_python import grep_python
from ._grep_ripgrep import RipgrepUnusable, grep_ripgrep
from ._paths import Guard, resolve_in_workspace

Engine = Literal["auto", "ripgrep", "python"]


class GrepInput(ToolInput):
    pattern: str = Field(
        min_length=1,
        description="A regular expression (Rust/Python syntax, case-sensitive; use (?i) for "
        "case-insensitive), matched against each line.",
    )
    path: str = Field(
        default=".",
        description="The file or directory to search, relative to the workspace root.",
    )
    glob: str | None = Field(
        default=None,
        description="Only search files matching this glob, ripgrep style: `*.py` matches at any "
        "depth, `src/**/*.ts` is anchored at the workspace root, `!*.min.js` excludes.",
    )


class GrepTool(Tool[GrepInput]):
    name = "grep"
    description = (
        "Search file contents in the workspace with a regular expression. Returns matching lines "
        "as `path:line:text`, sorted by path then line number, at most "
        f"{MAX_MATCHES} (it says how many more). Hidden files are searched; `.git`, binary files "
        "and symlinks are skipped."
    )
    Input = GrepInput

    def __init__(self, *, engine: Engine = "auto", cap: int = MAX_MATCHES) -> None:
        """``engine``: ``auto`` uses ripgrep when ``rg`` is on PATH at call time."""
        self.engine = engine
        self.cap = cap

    async def run(self, args: GrepInput, ctx: ToolContext) -> ToolOutput:
        root = workspace_root(ctx)
        if "\n" in args.pattern or "\\n" in args.pattern:
            raise ToolFailure(
                "the pattern may not match a line break: lines are searched one by one"
            )
        glob_text = args.glob.strip() if args.glob is not None else ""
        glob = OverrideGlob.parse(glob_text) if glob_text else None
        guard = await asyncio.to_thread(Guard.of, root, ctx.hidden)
        target = await asyncio.to_thread(
            resolve_in_workspace, root, args.path, must_exist=True, guard=guard
        )
        if not target.is_dir() and not target.is_file():
            raise ToolFailure(f"{display_path(root, target)} is not a regular file or directory")
        result = await self._search(root, target, args.pattern, glob, guard)
        return ToolOutput(_render(result, args, display_path(root, target)))

    async def _search(
        self, root: Path, target: Path, pattern: str, glob: OverrideGlob | None, guard: Guard
    ) -> GrepResult:
        rg = shutil.which("rg") if self.engine != "python" else None
        if self.engine == "ripgrep" and rg is None:
            raise ToolFailure("ripgrep (rg) is not installed")
        if rg is not None:
            target_rel = str(target.relative_to(root))
            try:
                return await grep_ripgrep(
                    rg,
                    root,
                    target_rel,
                    pattern,
                    glob.original if glob else None,
                    cap=self.cap,
                    guard=guard,
                )
            except RipgrepUnusable:
                pass
        return await asyncio.to_thread(
            grep_python, root, target, pattern, glob, cap=self.cap, guard=guard
        )


def _render(result: GrepResult, args: GrepInput, where: str) -> str:
    if not result.shown:
        suffix = f" (files matching {args.glob!r})" if args.glob else ""
        return f"No matches for {args.pattern!r} in {where}{suffix}"
    ordered = sorted(result.shown, key=lambda m: (m[0].split(b"/"), m[1]))
    lines = [f"{printable(os.fsdecode(path))}:{line}:{text}" for path, line, text in ordered]
    more = result.total - len(result.shown)
    if more:
        lines.append(f"[{more} more matches not shown; narrow the search with path or glob]")
    return "\n".join(lines)
