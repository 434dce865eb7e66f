"""What an HTTP door lets through: one module for both (``threadloom mcp --http`` and
``threadloom serve``), so they bind the same way, answer the same ``Host`` names, take the same
token the same way and say the same when they start.

- **Binding**: ``bind`` opens the listening socket before anything else happens, so an address
  that cannot be listened on is one line (exit 2) and nothing was created.
- **Host allow-list** (``Exposure.allows``), against DNS rebinding: a page on ``evil.example``
  whose name the attacker points at this machine reaches the server with ``Host:
  evil.example``. A server bound to the loopback answers only the loopback names and addresses
  (and the host as it was given); one bound elsewhere also answers this machine's names
  (``gethostname``, ``getfqdn``) and its own addresses (an address is this machine's when a
  socket can be bound to it), plus what the user adds (``--allow-host``). A name is never
  resolved: resolving the attacker's name is what rebinding relies on. An ``Origin`` header,
  when a browser sends one, must name an allowed host too.
- **Token** (``Exposure.token``): with one, every request carries it — ``Authorization: Bearer
  TOKEN``, or the cookie a browser got by opening ``/?token=TOKEN`` once (a ``GET`` with the
  token in its query is redirected to the same URL without it, the cookie set: ``HttpOnly``,
  ``SameSite=Strict``, named for the port so two servers on one host keep theirs). Compared in
  constant time (the SHA-256 digests, so not even its length shows). A token is generated at
  start (``new_token``) or read from a file the user names (``read_token``), never taken on the
  command line (other users see a process's arguments).
- **Start lines** (``start_lines``): one line saying where the door listens (and the token, when
  it was generated: printed once, there), and a warning when it is bound beyond the loopback.

Pure ASGI and the standard library: the MCP SDK's app and the viewer's Starlette app are both
wrapped by ``Guard``, and neither door's library is imported here.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from .errors import UsageError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
MIN_TOKEN_CHARS = 16
TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9._~+/=-]+$")
"""What a token may hold: the characters of an RFC 6750 bearer token (it travels in a header
and a cookie unquoted)."""
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
_LOCAL_CACHE_MAX = 256

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


# ----------------------------------------------------------------- binding


def bind(host: str, port: int, *, door: str) -> socket.socket:
    """A listening socket at ``host:port``, or one line (``UsageError``, exit 2) naming ``door``
    and why not: an empty host (it would bind every interface by accident: 0.0.0.0 says so on
    purpose), a host that does not resolve, an address in use or not this machine's."""
    if not host.strip():
        raise UsageError(
            f"{door}: host: empty; name the address to bind (0.0.0.0: every interface)"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # resolved apart first: create_server reports a failed lookup as an OSError whose errno is
    # a negative EAI_* code ("Unknown error -2" through strerror), and an over-long label as
    # a TypeError
    try:
        socket.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise UsageError(f"{door}: cannot resolve host {host!r}: {err.strerror}") from None
    except UnicodeError:
        raise UsageError(f"{door}: cannot resolve host {host!r}: not a valid host name") from None
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as err:
        # create_server's own message adds "(while attempting to bind on address …)"
        why = os.strerror(err.errno) if err.errno else str(err)
        raise UsageError(f"{door}: cannot listen on {shown_host(host)}:{port}: {why}") from None


def shown_host(host: str) -> str:
    """``host`` as it is written in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def is_loopback(address: str | None) -> bool:
    """Whether ``address`` is a loopback address (an IPv4-mapped one included)."""
    ip = _ip(address or "")
    if ip is None:
        return False
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


# ----------------------------------------------------------------- tokens


def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def read_token(path: str | Path, *, flag: str = "--token-file") -> str:
    """The token in the file at ``path`` (surrounding whitespace ignored), or one line naming
    the flag and the file and why it will not do: unreadable, empty, too short to guess at
    (``MIN_TOKEN_CHARS``), or holding characters a header cannot carry as they are."""
    p = Path(path).expanduser()
    try:
        token = p.read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise UsageError(f"{flag} {str(path)!r}: cannot read it: {why}") from None
    if len(token) < MIN_TOKEN_CHARS:
        raise UsageError(
            f"{flag} {str(path)!r}: the token is {len(token)} characters; at least"
            f" {MIN_TOKEN_CHARS}, e.g. python3 -c 'import secrets; print(secrets.token_urlsafe())'"
        )
    if not TOKEN_PATTERN.match(token):
        raise UsageError(
            f"{flag} {str(path)!r}: the token holds characters a header cannot carry as they"
            " are (use letters, digits and . _ ~ + / = -)"
        )
    return token


# ----------------------------------------------------------------- the exposure


@dataclass(frozen=True)
class Exposure:
    """How one HTTP door is exposed: where it is bound, the ``Host`` names it answers, and its
    token (None: none is asked for). Build it with ``expose``."""

    host: str
    """The host as the user gave it (what the start line shows)."""
    address: str
    """The address the socket is bound to."""
    port: int
    names: frozenset[str]
    """The ``Host`` names answered (lower case, no brackets, no trailing dot)."""
    token: str | None = None
    token_file: str | None = None
    """Where the token came from; None: generated at start."""
    _local: dict[str, bool] = field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.address)

    @property
    def cookie(self) -> str:
        """The token cookie's name (one per port: two servers on one host keep their own)."""
        return f"threadloom_token_{self.port}"

    def url(self, path: str = "/") -> str:
        return f"http://{shown_host(self.host)}:{self.port}{path}"

    def allows(self, host: str | None) -> bool:
        """Whether a request whose ``Host`` header is ``host`` is answered."""
        name = host_name(host)
        if name is None:
            return False
        if name in self.names:
            return True
        ip = _ip(name)
        if ip is None:
            return False  # a name nobody allowed: never resolved, never answered
        if is_loopback(name):
            return True
        return not self.loopback and self._is_local(name, ip.version)

    def allows_origin(self, origin: str) -> bool:
        """Whether a browser's ``Origin`` is this server (an allowed host, over http)."""
        parts = urlsplit(origin.strip())
        return parts.scheme == "http" and self.allows(parts.netloc)

    def _is_local(self, address: str, version: int) -> bool:
        """Whether ``address`` is one of this machine's: the kernel lets a socket bind only to
        its own addresses. Remembered (a bounded number of them)."""
        known = self._local.get(address)
        if known is not None:
            return known
        family = socket.AF_INET6 if version == 6 else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((address, 0))
            local = True
        except OSError:
            local = False
        if len(self._local) < _LOCAL_CACHE_MAX:
            self._local[address] = local
        return local

    def token_matches(self, supplied: str) -> bool:
        """Whether ``supplied`` is the token, compared in constant time."""
        if self.token is None:
            return False
        want = hashlib.sha256(self.token.encode()).digest()
        got = hashlib.sha256(supplied.encode("utf-8", "replace")).digest()
        return hmac.compare_digest(want, got)


def expose(
    sock: socket.socket,
    host: str,
    *,
    allow_hosts: Iterable[str] = (),
    token: str | None = None,
    token_file: str | None = None,
) -> Exposure:
    """The exposure of a door listening on ``sock`` (bound for ``host`` as the user gave it):
    the loopback names and the given host always; this machine's names too when the socket is
    bound beyond the loopback; and ``allow_hosts``."""
    address, port = sock.getsockname()[:2]
    names = {*LOOPBACK_NAMES, host_name(host) or ""}
    names.update(check_allowed_host(h) for h in allow_hosts)
    if not is_loopback(address):
        names.update({_bare(socket.gethostname()), _bare(socket.getfqdn())})
    return Exposure(
        host=host,
        address=str(address),
        port=int(port),
        names=frozenset(n for n in names if n),
        token=token,
        token_file=token_file,
    )


def check_allowed_host(value: str) -> str:
    """A ``--allow-host`` value as it is compared: a host name or address, without a port;
    anything else is one line (exit 2) saying so."""
    text = value.strip()
    ip = _ip(text[1:-1] if text.startswith("[") and text.endswith("]") else text)
    if ip is not None:
        return str(ip)
    name = _bare(text)
    if not _NAME.match(name):
        raise UsageError(f"--allow-host {value!r}: a host name or address, without a port")
    return name


def host_name(header: str | None) -> str | None:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]``, ``[v6]:port``) as it
    is compared — lower case, no brackets, one trailing dot dropped — or None when it is not a
    host at all (empty, malformed, a bare IPv6 address, characters no name has)."""
    if header is None:
        return None
    text = header.strip().lower()
    port = ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        name, rest = text[1:end], text[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                return None
            port = rest[1:]
        ip = _ip(name)
        return str(ip) if ip is not None and (not port or port.isdigit()) else None
    if text.count(":") > 1:
        return None  # an IPv6 address is written in brackets in a Host header
    name, _, port = text.partition(":")
    if port and not port.isdigit():
        return None
    name = _bare(name)
    ip = _ip(name)
    if ip is not None:
        return str(ip)
    return name if _NAME.match(name) else None


def _bare(name: str) -> str:
    name = name.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name[:-1] if name.endswith(".") else name


# ----------------------------------------------------------------- start lines


def start_lines(exposure: Exposure, *, what: str, path: str, browser: bool = False) -> list[str]:
    """What a door says when it starts, on stderr: one line saying where it listens and
    ``what`` it serves there, with the token when it was generated (said once, here; a
    ``browser`` door's as the link that signs a browser in), and, when it is bound beyond the
    loopback, a warning saying what that exposes."""
    url = exposure.url(path)
    said = [what]
    if exposure.token is not None:
        if exposure.token_file is not None:
            said.append(f"a token is required: the one in {exposure.token_file}")
        elif browser:
            link = f"{url}?{urlencode({'token': exposure.token})}"
            said.append(f"a token is required: open {link} once: it sets a cookie")
        else:
            said.append(f'a token is required: send "Authorization: Bearer {exposure.token}"')
    said.append("Ctrl-C stops")
    lines = [f"threadloom: serving {url} ({'; '.join(said)})"]
    if not exposure.loopback:
        if exposure.token is None:
            risk = (
                "every transcript in the database is served to anyone who can reach this port;"
                " protect it with a token (--require-token, or --token-file PATH)"
            )
        else:
            risk = (
                "only requests with the token are answered, but over plain HTTP: the token and"
                " every transcript cross the network unencrypted"
            )
        names = ", ".join(sorted(exposure.names))
        lines.append(
            f"threadloom: warning: bound to {exposure.host}, not the loopback: {risk}"
            f" (Host names answered: {names}, and this machine's addresses; --allow-host adds"
            " one)"
        )
    return lines


def announce(exposure: Exposure, *, what: str, path: str, browser: bool = False) -> None:
    """``start_lines`` on stderr, as a door starts."""
    for line in start_lines(exposure, what=what, path=path, browser=browser):
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


# ----------------------------------------------------------------- the guard


class Guard:
    """ASGI middleware in front of a door's app: a request whose ``Host`` (or ``Origin``) is not
    allowed is refused (400, 403), and, with a token, one without it (401, ``WWW-Authenticate:
    Bearer``). Lifespan events pass through."""

    def __init__(self, app: Any, exposure: Exposure) -> None:
        self.app = app
        self.exposure = exposure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, list[str]] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name.lower(), []).append(value.decode("latin-1"))
        hosts = headers.get(b"host", [])
        exp = self.exposure
        if len(hosts) != 1 or not exp.allows(hosts[0]):
            shown = hosts[0][:100] if hosts else ""
            why = f"unknown Host {shown!r}: this server answers {', '.join(sorted(exp.names))}"
            await _refuse(scope, send, 400, why)
            return
        origins = headers.get(b"origin", [])
        if origins and not all(exp.allows_origin(o) for o in origins):
            await _refuse(scope, send, 403, f"Origin {origins[0][:100]!r} is not this server")
            return
        if exp.token is not None:
            if any(exp.token_matches(t) for t in _credentials(headers, exp.cookie)):
                await self.app(scope, receive, send)
                return
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            browser = scope["type"] == "http" and scope.get("method") == "GET"
            if browser and "token" in query and exp.token_matches(query["token"]):
                await _sign_in(scope, send, exp)
                return
            await _refuse(
                scope,
                send,
                401,
                "a token is required: send Authorization: Bearer TOKEN (a browser: open"
                " /?token=TOKEN once)",
                [(b"www-authenticate", b'Bearer realm="threadloom"')],
            )
            return
        await self.app(scope, receive, send)


def _credentials(headers: dict[bytes, list[str]], cookie: str) -> list[str]:
    """Every token the request offers: bearer credentials, and the token cookie."""
    found = []
    for value in headers.get(b"authorization", []):
        scheme, _, credential = value.strip().partition(" ")
        if scheme.lower() == "bearer" and credential.strip():
            found.append(credential.strip())
    for value in headers.get(b"cookie", []):
        for pair in value.split(";"):
            name, _, got = pair.strip().partition("=")
            if name == cookie:
                found.append(got)
    return found


async def _refuse(
    scope: Scope,
    send: Send,
    status: int,
    text: str,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = (text + "\n").encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _sign_in(scope: Scope, send: Send, exposure: Exposure) -> None:
    """The browser's way in: the same URL without the token, with the token set as a cookie."""
    path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    rest = [
        (k, v)
        for k, v in parse_qsl(
            scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True
        )
        if k != "token"
    ]
    location = path + (f"?{urlencode(rest)}" if rest else "")
    assert exposure.token is not None
    cookie = f"{exposure.cookie}={exposure.token}; HttpOnly; SameSite=Strict; Path=/"
    headers = [
        (b"location", location.encode("latin-1")),
        (b"set-cookie", cookie.encode()),
        (b"cache-control", b"no-store"),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
