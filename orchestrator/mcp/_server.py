"""The MCP server object: settings, who calls, which models a client may have built
(``model_policy``), and how it is served (stdio, or streamable HTTP behind ``exposure.Guard``).
Where a call may work is ``_roots``.

Everything a call needs arrives in its arguments (refs, a workspace) or is read from the store;
nothing is kept in the MCP session, so a client that reconnects, or a second client, carries on
with the same refs. The ``mcp`` SDK is imported only here and in the tool and resource modules:
only ``threadloom mcp`` pays for it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ValidationError

from ..api import Orchestrator
from ..exposure import Exposure, Guard, announce
from ..jobs import RUN_OPTIONS, JobSpec
from ..model_policy import ModelPolicy
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


@dataclass(frozen=True, slots=True)
class Settings:
    """The server's defaults (``threadloom mcp`` flags). ``model``/``worker_model``: specs as in
    a job file (a relative ``scripted:`` path is the server's working directory's);
    ``budget_tokens`` bounds each client's job (0: none); ``cwd`` is the workspace of a call
    that names none from a client without roots. ``endpoints``: OpenAI-compatible endpoints a
    client's model may name besides the server's own (``--allow-endpoint``);
    ``allow_scripted``: whether a client may name a scripted model of its own
    (``model_policy``)."""

    model: str | None = None
    worker_model: str | None = None
    budget_tokens: int = 0
    max_parallel: int = 4
    cwd: Path = field(default_factory=Path.cwd)
    progress_every_s: float = 5.0
    endpoints: tuple[str, ...] = ()
    allow_scripted: bool = False


class Threadloom:
    """The server object: an ``MCPServer`` with threadloom's tools and resources over one
    ``Orchestrator`` and one job session (``Orchestrator.session``), which holds the runs that
    outlive a call. ``aclose`` stops what still runs (left ``interrupted``, resumable) — call it
    after serving.

    Every model ``orch`` builds from then on goes through the server's ``ModelPolicy`` (its
    model factory is wrapped): a client's work — and what that work starts, a ``run_job``
    lead's workers included — gets only the models the server allows its clients."""

    def __init__(self, orch: Orchestrator, settings: Settings | None = None) -> None:
        from workers import make_model

        from ._reading import register_reading
        from ._resources import register_resources
        from ._tools import register_tools

        self.orch = orch
        self.settings = s = settings or Settings()
        self.policy = ModelPolicy.of(
            (s.model, s.worker_model),
            endpoints=s.endpoints,
            scripted=s.allow_scripted,
            base_dir=s.cwd,
        )
        orch.model_factory = self.policy.guard(orch.model_factory or make_model)
        self.session = orch.session(progress_every_s=s.progress_every_s)
        self.server: MCPServer[Any] = _Server(
            SERVER_NAME, instructions=INSTRUCTIONS, version=_version(), log_level="WARNING"
        )
        register_tools(self)
        register_reading(self)
        register_resources(self)

    async def aclose(self) -> None:
        await self.session.aclose()

    # ------------------------------------------------------------------ who and where

    def client_name(self, ctx: Context[Any, Any]) -> str:
        """The client's name (its lead is titled ``mcp: <name>``): one line, at most
        ``MAX_CLIENT_NAME`` characters, whatever the client sent."""
        params = ctx.session.client_params
        name = params.client_info.name if params is not None else ""
        return " ".join(name.split())[:MAX_CLIENT_NAME].rstrip() or "client"

    def models(self, *specs: str | None) -> None:
        """The models a client named, each refused unless it may have it (``ModelPolicy``):
        said before anything is stored, whatever the call would store first."""
        for spec in specs:
            if spec:
                self.policy.check(spec)

    def job_spec(self, client: str, workspace: Path) -> JobSpec:
        """The spec of a client's job in one workspace: the server's models and budget."""
        s = self.settings
        flags = {o.key: getattr(s, o.key) for o in RUN_OPTIONS if o.server}  # ``mcp``'s
        return JobSpec(
            name=f"mcp: {client}",
            goal=f"Tasks dispatched by the MCP client {client!r}, whose agent is the lead.",
            workspace=str(workspace),
            base_dir=str(s.cwd),
            **{k: v for k, v in flags.items() if v is not None},
        )

    # ------------------------------------------------------------------ serving

    async def serve_stdio(self) -> None:
        await self.server.run_stdio_async()

    async def serve_http(self, sock: socket.socket, exposure: Exposure) -> None:
        """Streamable HTTP at ``http://HOST:PORT/mcp`` on ``sock`` (bound by
        ``exposure.bind``), behind ``exposure.Guard``: the Host and Origin names it allows
        (against DNS rebinding, as for ``serve``) and its bearer token. Says where it listens
        (one line on stderr, the token in it when it was generated) before it serves."""
        import uvicorn

        # the Guard checks Host and Origin for both HTTP doors: the SDK's own check (bound
        # host and loopback names only) would refuse the machine's names a non-loopback bind
        # answers, and would be a second, different list
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        app = self.server.streamable_http_app(transport_security=security, host=exposure.host)
        config = uvicorn.Config(Guard(app, exposure), log_level="warning")
        announce(exposure, what="MCP, streamable HTTP", path="/mcp")
        # the SDK's run_streamable_http_async, on a socket bound first: uvicorn binding it
        # itself logs a failure and exits the process
        await uvicorn.Server(config).serve(sockets=[sock])


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
