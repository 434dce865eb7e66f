"""The worker tools by name, as a job file's ``tools = [...]`` names them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._base import Tool
from ._bash import BashTool
from ._edit_file import EditFileTool
from ._grep import GrepTool
from ._list_files import ListFilesTool
from ._read_file import ReadFileTool
from ._write_file import WriteFileTool

TOOL_REGISTRY: dict[str, type[Tool[Any]]] = {
    tool.name: tool
    for tool in (ReadFileTool, WriteFileTool, EditFileTool, ListFilesTool, GrepTool, BashTool)
}

DEFAULT_WORKER_TOOLS: tuple[str, ...] = (
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "grep",
    "bash",
)


def build_tools(names: Sequence[str]) -> list[Tool[Any]]:
    """One tool instance per name, in the order given. An unknown or repeated name is a
    ``ValueError`` naming it (and, when unknown, listing the valid names): a job file's typo
    should fail before any model call, and providers reject duplicate tool names."""
    if isinstance(names, str):
        raise TypeError("build_tools takes a sequence of tool names, not one string")
    tools: list[Tool[Any]] = []
    seen: set[str] = set()
    for name in names:
        if name not in TOOL_REGISTRY:
            valid = ", ".join(sorted(TOOL_REGISTRY))
            raise ValueError(f"unknown tool {name!r}; valid tools: {valid}")
        if name in seen:
            raise ValueError(f"tool {name!r} is listed more than once")
        seen.add(name)
        tools.append(TOOL_REGISTRY[name]())
    return tools
