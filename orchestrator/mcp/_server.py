"""The MCP server object: settings, where a call works (workspace and roots), who calls, and how
it is served (stdio or streamable HTTP).

Everything a call needs arrives in its arguments (refs, a workspace) or is read from the store;
nothing is kept in the MCP session, so a client that reconnects, or a second client, carries on
with the same refs. The ``mcp`` SDK is imported only here and in the tool and resource modules:
only ``threadloom mcp`` pays for it.
"""

from __future__ import annotations

import asyncio
import socket
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import ValidationError

from ..api import Orchestrator
from ..background import Background
from ..errors import CliError
from ..jobs import DEFAULT_MODEL, JobSpec
from ._refusals import validation_line

log = structlog.get_logger("threadloom.mcp")

SERVER_NAME = "threadloom"
INSTRUCTIONS = (
    "threadloom is a subagent system: you are the lead. `dispatch` runs tasks on fresh-context"
    " workers in parallel and returns each worker's distilled result with the ref of its"
    " thread; work still running after wait_s is collected with `wait(refs)`. Read any"
    " transcript by ref with `read_thread` (bounded pages) or `ask_thread`; continue a worker"
    " with `resume_thread`, branch it with `fork_thread`. Refs (T-…) stay valid across"
    " sessions and clients."
)
MAX_CLIENT_NAME = 100
ROOTS_TIMEOUT_S = 3.0
"""A client that declares roots but does not answer within this costs a call no more: the call
works without them (its wait_s, at most 50 s, still leaves room under a client's ~60 s)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """The server's defaults (``threadloom mcp`` flags). ``model``/``worker_model``: specs as in
    a job file (a relative ``scripted:`` path is the server's working directory's);
    ``budget_tokens`` bounds each client's job (0: none); ``cwd`` is the workspace of a call
    that names none from a client without roots."""

    model: str | None = None
    worker_model: str | None = None
    budget_tokens: int = 0
    max_parallel: int = 4
    cwd: Path = field(default_factory=Path.cwd)
    progress_every_s: float = 5.0


class Threadloom:
    """The server object: an ``MCPServer`` with threadloom's tools and resources over one
    ``Orchestrator`` and its ``Background`` runner. ``aclose`` stops what still runs (left
    ``interrupted``, resumable) — call it after serving."""

    def __init__(self, orch: Orchestrator, settings: Settings | None = None) -> None:
        from ._resources import register_resources
        from ._tools import register_tools

        self.orch = orch
        self.settings = settings or Settings()
        self.background = Background(orch, progress_every_s=self.settings.progress_every_s)
        self.server: MCPServer[Any] = _Server(
            SERVER_NAME, instructions=INSTRUCTIONS, version=_version(), log_level="WARNING"
        )
        register_tools(self)
        register_resources(self)

    async def aclose(self) -> None:
        await self.background.aclose()

    # ------------------------------------------------------------------ who and where

    def client_name(self, ctx: Context[Any, Any]) -> str:
        """The client's name (its lead is titled ``mcp: <name>``): one line, at most
        ``MAX_CLIENT_NAME`` characters, whatever the client sent."""
        params = ctx.session.client_params
        name = params.client_info.name if params is not None else ""
        return " ".join(name.split())[:MAX_CLIENT_NAME].rstrip() or "client"

    async def roots(self, ctx: Context[Any, Any]) -> list[Path]:
        """The client's roots as local directories; ``[]`` when it has none or cannot say."""
        session = ctx.session
        caps = session.client_capabilities
        if caps is None or caps.roots is None or not session.can_send_request:
            return []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                listed = await asyncio.wait_for(session.list_roots(), ROOTS_TIMEOUT_S)
        except Exception as exc:  # a client that declares roots but cannot list them
            log.warning("mcp.roots_unavailable", error=str(exc))
            return []
        return local_dirs([str(root.uri) for root in listed.roots])

    async def workspace(self, ctx: Context[Any, Any], given: str | None) -> Path:
        """The ``workspace`` argument, else the client's first root, else the server's working
        directory. A path outside the client's roots is refused."""
        return place(await self.roots(ctx), self.settings.cwd, given)

    def job_spec(self, client: str, workspace: Path) -> JobSpec:
        """The spec of a client's job in one workspace: the server's models and budget."""
        s = self.settings
        return JobSpec(
            name=f"mcp: {client}",
            goal=f"Tasks dispatched by the MCP client {client!r}, whose agent is the lead.",
            workspace=str(workspace),
            model=s.model or DEFAULT_MODEL,
            worker_model=s.worker_model,
            max_parallel=s.max_parallel,
            budget_tokens=s.budget_tokens,
            base_dir=str(s.cwd),
        )

    # ------------------------------------------------------------------ serving

    async def serve_stdio(self) -> None:
        await self.server.run_stdio_async()

    async def serve_http(self, host: str, port: int, *, sock: socket.socket | None = None) -> None:
        """Streamable HTTP at ``http://HOST:PORT/mcp`` with the SDK's DNS-rebinding protection
        on: only this host (and the loopback names) may be named in ``Host`` and ``Origin``.
        ``sock``: the socket ``listen(host, port)`` bound (else it is bound here); it is
        closed when serving ends."""
        import uvicorn

        names = [host, "127.0.0.1", "localhost", "[::1]"]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{n}:*" for n in dict.fromkeys(names)],
            allowed_origins=[f"http://{n}:*" for n in dict.fromkeys(names)],
        )
        # the SDK's run_streamable_http_async, on a socket bound first: uvicorn binding it
        # itself logs a failure and exits the process
        app = self.server.streamable_http_app(transport_security=security, host=host)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        with sock or listen(host, port) as bound:
            await uvicorn.Server(config).serve(sockets=[bound])


def listen(host: str, port: int) -> socket.socket:
    """A listening socket at ``host:port``, or one line (exit 2) saying why not — the address
    is in use, the host does not resolve or is not this machine's — as ``serve`` says it."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as err:
        sock.close()
        why = err.strerror or str(err)  # getaddrinfo's too: "Name or service not known"
        shown = f"[{host}]" if ":" in host else host
        raise CliError(f"mcp: cannot listen on {shown}:{port}: {why}") from None
    return sock


def local_dirs(uris: list[str]) -> list[Path]:
    """``file://`` root URIs as resolved local paths (other schemes are not directories)."""
    out = []
    for raw in uris:
        uri = urlparse(raw)
        if uri.scheme == "file":
            out.append(Path(unquote(uri.path)).resolve())
    return out


def place(roots: list[Path], cwd: Path, given: str | None) -> Path:
    """Where a call works: ``given`` (relative to the first root, else ``cwd``), else the first
    root, else ``cwd``; refused outside the roots, or when it is not a directory."""
    base = roots[0] if roots else cwd
    path = base if not given else (base / Path(given).expanduser()).resolve()
    if roots and not any(path == r or path.is_relative_to(r) for r in roots):
        shown = ", ".join(str(r) for r in roots)
        raise ToolError(f"workspace {path} is outside the client's roots ({shown})")
    if not path.is_dir():
        raise ToolError(f"workspace {path}: no such directory")
    return path


class _Server(MCPServer[Any]):
    """The SDK's server, with arguments that fail validation answered in one line per field
    (``tasks.0.prompt: Field required``) instead of pydantic's multi-line report, and unknown
    arguments refused (the SDK drops them: a misspelt ``wait_s`` would silently be 45 s)."""

    _arguments: dict[str, set[str]] | None = None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        if self._arguments is None:
            self._arguments = {
                t.name: set(t.input_schema.get("properties", {})) for t in await self.list_tools()
            }
        known = self._arguments.get(name)
        unknown = sorted(set(arguments) - known) if known is not None else []
        if unknown:
            expected = ", ".join(sorted(known or ()))
            raise ToolError(f"{name}: unknown argument {unknown[0]!r} (expected {expected})")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(f"{name}: {validation_line(exc.__cause__)}") from exc.__cause__
            raise


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("threadloom")
    except PackageNotFoundError:  # a source checkout that was never installed
        return "0"
