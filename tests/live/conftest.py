"""The live suite's gate and its one exception to the suite-wide network guard.

``tests/live`` runs only when ``THREADLOOM_LIVE_MODEL`` names a real endpoint
(``openai:MODEL@URL``, or ``anthropic:MODEL`` with ``ANTHROPIC_API_KEY``) and never under CI;
otherwise every test here is skipped with the reason, which ``pytest -ra`` prints.

``tests/conftest.py``'s autouse ``_no_network`` blocks every connection that is not to loopback
and removes the API keys. This directory overrides that fixture (same name, closer conftest):
when a live model is named it allows loopback and the named endpoint's host only (for
``anthropic:``, the host of ``ANTHROPIC_BASE_URL`` or ``api.anthropic.com``), and keeps the
keys; when none is named it applies the suite-wide guard unchanged.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests import conftest as suite
from workers.providers import parse_model_spec

LIVE_VAR = "THREADLOOM_LIVE_MODEL"
HERE = os.path.dirname(__file__)


def live_spec() -> str | None:
    return os.environ.get(LIVE_VAR, "").strip() or None


def skip_reason() -> str | None:
    """Why the live suite does not run here, or None when it does."""
    if os.environ.get("CI"):
        return "tests/live never runs in CI (CI is set)"
    spec = live_spec()
    if spec is None:
        return (
            f"{LIVE_VAR} is not set: name a real endpoint to run tests/live, e.g."
            f" {LIVE_VAR}=openai:qwen2.5-coder@http://127.0.0.1:8080/v1 or anthropic:MODEL"
            " (README: Running on a local model)"
        )
    if spec.startswith("anthropic:") and not os.environ.get("ANTHROPIC_API_KEY"):
        return f"{LIVE_VAR}={spec} needs ANTHROPIC_API_KEY"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = skip_reason()
    if reason is None:
        spec = live_spec()
        assert spec is not None
        try:
            parse_model_spec(spec)
        except ValueError as exc:  # a malformed spec stops the run at once, in one line
            raise pytest.UsageError(f"{LIVE_VAR}: {exc}") from None
        return
    mark = pytest.mark.skip(reason=reason)
    for item in items:
        if str(item.path).startswith(HERE + os.sep):
            item.add_marker(mark)


def endpoint_hosts(spec: str) -> set[str]:
    """The host names the named model may be reached at."""
    parsed = parse_model_spec(spec)
    if parsed.provider == "openai":
        url = parsed.base_url or ""
    elif parsed.provider == "anthropic":
        url = os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
    else:
        return set()
    host = urlsplit(url).hostname
    return {host.lower()} if host else set()


class EndpointGuard:
    """Loopback, the named hosts, and the addresses those names resolved to: nothing else."""

    def __init__(self, hosts: set[str]) -> None:
        self.hosts = hosts
        self.addresses: set[str] = set()

    def allowed(self, host: Any) -> bool:
        if isinstance(host, bytes):
            host = host.decode()
        if not isinstance(host, str):
            return False
        return suite._is_loopback(host) or host.lower() in self.hosts or host in self.addresses

    def check(self, sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0] if isinstance(address, tuple) else address
            if not self.allowed(host):
                raise RuntimeError(
                    f"live tests may reach only {sorted(self.hosts)} and loopback:"
                    f" connect to {address!r} blocked"
                )

    def connect(self, sock: socket.socket, address: Any) -> None:
        self.check(sock, address)
        suite._real_connect(sock, address)

    def connect_ex(self, sock: socket.socket, address: Any) -> int:
        self.check(sock, address)
        return suite._real_connect_ex(sock, address)

    def getaddrinfo(self, host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not self.allowed(host):
            raise RuntimeError(f"live tests may not look up {host!r}")
        found = suite._real_getaddrinfo(host, *args, **kwargs)
        self.addresses.update(str(info[4][0]) for info in found)
        return found


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Overrides the suite-wide guard for tests/live only (see the module docstring)."""
    spec = live_spec()
    if spec is None or skip_reason() is not None:
        monkeypatch.setattr(socket.socket, "connect", suite._guarded_connect)
        monkeypatch.setattr(socket.socket, "connect_ex", suite._guarded_connect_ex)
        monkeypatch.setattr(socket, "getaddrinfo", suite._guarded_getaddrinfo)
        for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/blocked-by-tests")
        yield
        return
    guard = EndpointGuard(endpoint_hosts(spec))

    # plain functions, not bound methods: set on the class, they must receive the socket
    def connect(sock: socket.socket, address: Any) -> None:
        guard.connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        return guard.connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", guard.getaddrinfo)
    yield
