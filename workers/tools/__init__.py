"""The worker's coding tools, confined to the workspace.

``build_tools(names)`` makes the tools a job asks for; each has ``spec()`` (what the model sees)
and ``invoke(raw_input, ctx)`` (validates, runs, and answers every domain problem with an error
``ToolOutput`` instead of raising). Paths are confined by ``resolve_in_workspace``: anything that
is, or resolves, outside ``ctx.workspace`` is refused with ``PathRefused``'s reason.
"""

from ._base import BlockingTool, Tool, ToolContext, ToolInput, ToolOutput
from ._bash import BashTool, scrubbed_environment
from ._edit_file import EditFileTool
from ._errors import GlobError, PathRefused, ToolFailure
from ._grep import GrepTool
from ._list_files import ListFilesTool
from ._paths import resolve_in_workspace
from ._pids import PIDS_MAX, ProcessLimit, ProcessLimitUnavailable, process_limit
from ._read_file import ReadFileTool
from ._registry import DEFAULT_WORKER_TOOLS, TOOL_REGISTRY, build_tools
from ._sandbox import (
    SandboxSettings,
    SandboxStatus,
    SandboxUnavailable,
    require_sandbox,
    sandbox_status,
)
from ._write_file import WriteFileTool

__all__ = [
    "DEFAULT_WORKER_TOOLS",
    "PIDS_MAX",
    "TOOL_REGISTRY",
    "BashTool",
    "BlockingTool",
    "EditFileTool",
    "GlobError",
    "GrepTool",
    "ListFilesTool",
    "PathRefused",
    "ProcessLimit",
    "ProcessLimitUnavailable",
    "ReadFileTool",
    "SandboxSettings",
    "SandboxStatus",
    "SandboxUnavailable",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolInput",
    "ToolOutput",
    "WriteFileTool",
    "build_tools",
    "process_limit",
    "require_sandbox",
    "resolve_in_workspace",
    "sandbox_status",
    "scrubbed_environment",
]
