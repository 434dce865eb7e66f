"""Serving: open the store, serve one transport until the client goes (EOF on stdin, or the HTTP
server is stopped), then stop what still runs (threads left ``interrupted``, resumable)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..api import Orchestrator
from ..errors import UsageError
from ..exposure import bind, expose
from ._server import Settings, Threadloom


@dataclass(frozen=True, slots=True)
class Http:
    """How ``mcp --http`` is exposed: where it binds, the bearer token every request must
    carry (``token_file``: where it came from; None: generated at start), and the Host names
    it answers besides this machine's (``allow_hosts``)."""

    host: str
    port: int
    token: str
    token_file: str | None = None
    allow_hosts: Sequence[str] = ()


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8000`` for IPv6) → (host, port); a bad one is exit 2."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--http {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    return host, int(port)


async def serve(
    db: str, *, create_dirs: bool, settings: Settings, http: Http | None = None
) -> None:
    """Serve stdio, or (``http``) streamable HTTP on a socket bound before the store is opened:
    an address that cannot be listened on is one line (exit 2) and nothing was created."""
    sock = bind(http.host, http.port, door="mcp") if http is not None else None
    try:
        async with await Orchestrator.open(db, create_dirs=create_dirs) as orch:
            app = Threadloom(orch, settings)
            try:
                if http is None:
                    await app.serve_stdio()
                else:
                    assert sock is not None
                    exposure = expose(
                        sock,
                        http.host,
                        allow_hosts=http.allow_hosts,
                        token=http.token,
                        token_file=http.token_file,
                    )
                    await app.serve_http(sock, exposure)
            finally:
                await app.aclose()
    finally:
        if sock is not None:
            sock.close()
