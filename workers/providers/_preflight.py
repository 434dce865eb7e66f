"""Whether an endpoint can be reached at all, asked once before a job stores anything.

A job pointed at a port nobody listens on, a host name that does not resolve or a server whose
TLS handshake fails would otherwise find out on its first model call, and every thread would
retry it (``_retry``) before the job fails. ``unreachable(url)`` opens one TCP connection to the
URL's host and port (with the TLS handshake for ``https``) and closes it, sending no request: the
server sees a connection come and go, nothing it records or bills.

It says "unreachable" only for what no retry mends within a job: the connection refused, the
name not resolved, the TLS handshake refused or failed, no route. A connection that does not
answer within ``timeout`` (a slow or busy network) is not judged here: the job starts, and its
requests keep their retries. Through a proxy (``HTTPS_PROXY`` and the like, which httpx honours)
the endpoint is not ours to dial: not checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import urllib.request
from urllib.parse import urlsplit

PREFLIGHT_TIMEOUT_S = 5.0


def _proxied(scheme: str, host: str) -> bool:
    proxies = urllib.request.getproxies()
    if not (proxies.get(scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(host)


async def unreachable(url: str, *, timeout: float = PREFLIGHT_TIMEOUT_S) -> str | None:
    """Why ``url``'s server cannot be connected to (one short phrase), or None: it can, or that
    cannot be judged now (a timeout, a proxy, a URL that is not http(s))."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in ("http", "https") or not host:
        return None
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        return None  # a bad port is the request's to refuse, with its own message
    if _proxied(scheme, host):
        return None
    tls = ssl.create_default_context() if scheme == "https" else None
    where = f"{host}:{port}"
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(
                host, port, ssl=tls, server_hostname=host if tls else None
            )
    except TimeoutError:
        return None
    except socket.gaierror as exc:
        return f"the host name {host!r} does not resolve ({exc.strerror or exc})"
    except ssl.SSLError as exc:
        return f"the TLS handshake with {where} failed ({exc.reason or exc})"
    except ConnectionRefusedError:
        return f"connection refused by {where} (nothing listens there)"
    except OSError as exc:
        return f"cannot connect to {where} ({exc.strerror or exc})"
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return None
