"""Suite-wide guards: no test reaches a real model or the internet.

Only loopback addresses (and Unix sockets: PostgreSQL, subprocess pipes) may be connected to.
Provider tests run the real SDKs against loopback fake servers (``tests/fakes``).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def _is_loopback(host: Any) -> bool:
    if not isinstance(host, str):
        return False
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _check(sock: socket.socket, address: Any) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0] if isinstance(address, tuple) else address
        if not _is_loopback(host):
            raise RuntimeError(f"tests may not reach the network: connect to {address!r} blocked")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check(self, address)
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check(self, address)
    return _real_connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and not _is_loopback(host if isinstance(host, str) else host.decode()):
        raise RuntimeError(f"tests may not reach the network: name lookup of {host!r} blocked")
    return _real_getaddrinfo(host, *args, **kwargs)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any real model call (or any other internet access) fails the test."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", _guarded_getaddrinfo)
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/blocked-by-tests")


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the commands the tests start, however the suite was started. A suite run
    in the background of a shell without job control (``pytest … &``, ``nohup``) inherits
    SIGINT *ignored*, and passes that on to every process it starts (an ignored signal stays
    ignored across exec): the Ctrl-C tests then saw their ``threadloom`` run to the end and
    exit 0 instead of 130, and each Temporal host, which stops on SIGINT, held its test's
    teardown for the whole 20 s of its wait before it was killed. A handler set here (not
    ignored) becomes the default disposition in the xdist workers and every child."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under CI the sandbox and the ripgrep path are tested for real, never skipped: a missing
    ``bwrap`` or ``rg`` (or a bubblewrap that does not work here) fails the run at once."""
    import os
    import shutil

    if not os.environ.get("CI"):
        return
    missing = [tool for tool in ("bwrap", "rg") if shutil.which(tool) is None]
    if missing:
        pytest.exit(f"CI needs {', '.join(missing)} installed (see .ci/run)", returncode=1)
    from workers.tools._sandbox import sandbox_status

    status = sandbox_status()
    if not status.available:
        pytest.exit(f"CI needs a working bubblewrap: {status.reason}", returncode=1)
