"""threadloom as an MCP server (``threadloom mcp``): the subagent system of any MCP client, whose
agent is the lead. Importing this package imports the ``mcp`` SDK (seconds): only the ``mcp``
command does.
"""

from __future__ import annotations

from ._main import Http, parse_http, serve
from ._server import Settings, Threadloom

__all__ = ["Http", "Settings", "Threadloom", "parse_http", "serve"]
