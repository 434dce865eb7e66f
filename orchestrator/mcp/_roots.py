"""Where a client's work may go: its roots, asked on every protocol version the SDK speaks.

A client that declares the ``roots`` capability confines the work it starts to its roots: the
workspace of a ``dispatch`` or ``run_job``, and the place a ``resume_thread`` or
``fork_thread`` would run (``Orchestrator.run_place``: the thread's own workspace, whoever
started it). How the roots are asked depends on the protocol version of the call:

- on a handshake version (2024-11-05 … 2025-11-25) the server sends ``roots/list`` to the
  client in the middle of the call, and waits at most ``ROOTS_TIMEOUT_S`` for the answer;
- on 2026-07-28 a server cannot send requests of its own: the call is answered with an
  ``InputRequiredResult`` asking for the roots, and the client retries it with them (the SDK's
  ``Resolve(ListRoots)``); the tool's body runs only then, so nothing is started before.

Either way a client that declares roots and does not give them (no answer, an error, a
connection that cannot carry the question, no local directory among them) is refused: work is
never started unconfined because asking failed. A client that declares no roots, or lists
none, is not confined (the server's user gave it the server).
"""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote, urlparse

from mcp.server.mcpserver import Context, ListRoots, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import ListRootsResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS, is_version_at_least

from ..api import RunPlace

ROOTS_TIMEOUT_S = 10.0
"""How long a handshake-era client has to list its roots before the call is refused (a call's
wait_s, at most 50 s, still leaves room under a client's ~60 s)."""


async def ask_roots(ctx: Context[Any, Any]) -> ListRoots | ListRootsResult | None:
    """The client's roots, asked as its protocol version asks (the module's docstring); None
    when it declares none. A handshake-era client that declares roots and cannot list them is
    refused here."""
    caps = ctx.client_capabilities
    if caps is None or caps.roots is None:
        return None
    version = ctx.protocol_version
    if version is not None and is_version_at_least(version, MODERN_PROTOCOL_VERSIONS[0]):
        return ListRoots()  # the SDK asks in the call's InputRequiredResult
    session = ctx.session
    why = "this connection cannot carry the question"
    if session.can_send_request:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                return await asyncio.wait_for(session.list_roots(), ROOTS_TIMEOUT_S)
        except TimeoutError:
            why = f"no answer within {ROOTS_TIMEOUT_S:g} s"
        except Exception as exc:  # an error answer, a malformed one, a connection gone
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
    raise ToolError(
        f"the client declares roots but did not list them ({why}): work it starts is confined"
        " to its roots, so none is started without them"
    )


ClientRoots = Annotated[ListRootsResult | None, Resolve(ask_roots)]
"""A tool parameter filled with the client's roots (never one of its arguments)."""


@dataclass(frozen=True, slots=True)
class Roots:
    """The directories a client's work may go to; ``dirs`` empty: anywhere (a client that
    declares no roots)."""

    dirs: tuple[Path, ...] = ()

    @classmethod
    def of(cls, listed: ListRootsResult | None) -> Roots:
        """The roots a client listed, as local directories; refused when it listed some and
        none of them is one (a ``https:`` root, a ``file:`` URI of another host)."""
        if listed is None or not listed.roots:
            return cls()
        uris = [str(root.uri) for root in listed.roots]
        dirs = local_dirs(uris)
        if not dirs:
            shown = ", ".join(u[:100] for u in uris[:3])
            raise ToolError(
                f"none of the client's roots is a local directory ({shown}): work it starts is"
                " confined to its roots, so none is started"
            )
        return cls(tuple(dirs))

    def holds(self, path: Path) -> bool:
        return not self.dirs or any(path == r or path.is_relative_to(r) for r in self.dirs)

    def place(self, cwd: Path, given: str | None) -> Path:
        """Where a call works: ``given`` (relative to the first root, else ``cwd``), else the
        first root, else ``cwd``; refused outside the roots, or when it is not a directory."""
        base = self.dirs[0] if self.dirs else cwd
        path = base if not given else (base / Path(given).expanduser()).resolve()
        self.check(path, what="workspace")
        if not path.is_dir():
            raise ToolError(f"workspace {path}: no such directory")
        return path

    def check(self, path: Path, *, what: str) -> None:
        if not self.holds(path):
            shown = ", ".join(str(r) for r in self.dirs)
            raise ToolError(f"{what} {path} is outside the client's roots ({shown})")

    def check_sandbox(self, sandbox: str | None, *, what: str) -> None:
        """A confined client cannot have bash run without the sandbox: the sandbox is what
        keeps bash's writes in the workspace."""
        if self.dirs and sandbox == "none":
            raise ToolError(
                f"{what}: sandbox 'none' lets bash write outside the workspace, and the"
                " client's work is confined to its roots: keep the sandbox"
            )

    def check_run(self, place: RunPlace, ref: str) -> None:
        """A resume or fork of ``ref`` runs where ``place`` says: refused outside the roots,
        or without the sandbox."""
        self.check(place.workspace, what=f"{ref} works in")
        self.check_sandbox(place.sandbox, what=f"{ref}'s job")


def local_dirs(uris: list[str]) -> list[Path]:
    """``file://`` root URIs of this host as resolved local paths (other schemes, and files on
    another host, are not local directories)."""
    out = []
    for raw in uris:
        uri = urlparse(raw)
        if uri.scheme == "file" and uri.netloc in ("", "localhost"):
            out.append(Path(unquote(uri.path)).resolve())
    return out
