"""Both HTTP doors — ``threadloom serve`` and ``threadloom mcp --http`` — as they are exposed
(``orchestrator.exposure``): hostile ``Host`` and ``Origin`` headers against each, bound to the
loopback and to every interface; the token (a browser's way in through one link, a script's
bearer header, nothing without it); the line each says when it starts, and the warning when it
is bound beyond the loopback. The real commands, in subprocesses, spoken to over raw sockets so
every header is exactly what a hostile page's browser (or anyone) would send."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import tests.mcp.test_e2e
from tests.orchestrator.test_cli_helpers import clean_env, run_cli

from ._data import Refs

GUARD_S = 120.0  # a hang guard, not a timing claim

INITIALIZE = json.dumps(tests.mcp.test_e2e.INITIALIZE)


def hostile_hosts(port: int) -> list[list[str] | None]:
    """``Host`` headers a DNS-rebinding page (or anyone) may send: each a list of the Host
    header lines to send (None: none at all)."""
    names = [
        "evil.example",
        f"evil.example:{port}",
        "127.0.0.1.evil.example",
        f"localhost.evil.example:{port}",
        "LOCALHOST.EVIL.EXAMPLE",
        "[::1].evil.example",
        f"127.0.0.1@evil.example:{port}",
        "evil.example#@127.0.0.1",
        f"localhost:{port}:{port}",
        "localhost:abc",
        "0x7f.0.0.1",
        "127.1",
        "localhost..",
        "::1",
        "[::1",
        "ｌocalhost",  # a full-width l
        "xn--lcalhost-9za",
        "",
        "192.0.2.123",  # TEST-NET: no address of this machine
    ]
    return [[n] for n in names] + [None, ["127.0.0.1", "evil.example"]]


REFUSED = (400, 403, 421)
"""A refusal: a bad request (the Host), forbidden (the Origin), misdirected (the SDK's own)."""
HOSTILE_ORIGINS = ("http://evil.example", "null", "http://127.0.0.1.evil.example", "file://")


def machine_addresses() -> list[str]:
    """This machine's IPv4 addresses beyond the loopback (SIOCGIFADDR, interface by interface:
    no name is resolved and nothing is sent)."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _index, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            address = socket.inet_ntoa(raw[20:24])
            if not address.startswith("127."):
                found.append(address)
    return found


@dataclass
class Door:
    """One HTTP door running: its port, what it said at start, and how to knock."""

    kind: str  # "serve" or "mcp"
    port: int
    said: list[str]
    token: str | None

    def status(
        self,
        hosts: list[str] | None,
        *,
        origin: str | None = None,
        token: str | None = None,
        cookie: str | None = None,
        path: str | None = None,
    ) -> tuple[int, dict[str, str]]:
        """The status and headers of one request with exactly these Host lines (raw bytes: a
        library would fix a malformed header up)."""
        lines = []
        if self.kind == "serve":
            lines.append(f"GET {path or '/'} HTTP/1.1")
        else:
            lines.append(f"POST {path or '/mcp'} HTTP/1.1")
            lines += [
                "Content-Type: application/json",
                "Accept: application/json, text/event-stream",
                f"Content-Length: {len(INITIALIZE)}",
            ]
        lines += [f"Host: {h}" for h in hosts or []]
        if origin is not None:
            lines.append(f"Origin: {origin}")
        if token is not None:
            lines.append(f"Authorization: Bearer {token}")
        if cookie is not None:
            lines.append(f"Cookie: {cookie}")
        lines.append("Connection: close")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
        if self.kind == "mcp":
            request += INITIALIZE.encode()
        with socket.create_connection(("127.0.0.1", self.port), timeout=GUARD_S) as s:
            s.sendall(request)
            reply = b""
            while b"\r\n\r\n" not in reply:
                chunk = s.recv(65536)
                if not chunk:
                    break
                reply += chunk
        head = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(head[0].split()[1]), headers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def door(kind: str, db: str, host: str, *flags: str, tmp: Path) -> Iterator[Door]:
    """``threadloom serve`` or ``threadloom mcp --http`` bound to ``host``, until the block
    ends; what it says at start is read from its stderr."""
    port = free_port()
    if kind == "serve":
        args = ["serve", "--host", host, "--port", str(port), *flags]
    else:
        args = ["mcp", "--http", f"{host}:{port}", *flags]
    log = tmp / f"{kind}-{port}.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "--db", db, *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=clean_env(),
        )
    try:
        start = time.monotonic()
        while True:
            said = log.read_text()
            wanted = 1 if host.startswith("127.") else 2
            if said.count("\n") >= wanted:
                break
            assert proc.poll() is None, said
            assert time.monotonic() - start < GUARD_S, f"{kind} never said where it listens"
            time.sleep(0.05)  # polls another process's log: no event to wait on
        lines = said.splitlines()
        token = None
        if kind == "mcp":
            found = re.search(r'"Authorization: Bearer ([^"<]+)"', lines[0])
            token = found[1] if found else None
        else:
            found = re.search(r"\?token=([^ ]+) once", lines[0])
            token = found[1] if found else None
        yield Door(kind, port, lines, token)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@dataclass
class Count:
    attempts: int = 0
    answered: int = 0


def knock_hostile(d: Door, count: Count) -> list[str]:
    """Every hostile Host and Origin against ``d``, with its token when it has one: what was
    answered (anything but the refusal)."""
    through = []
    for hosts in hostile_hosts(d.port):
        count.attempts += 1
        status, _ = d.status(hosts, token=d.token)
        if status not in REFUSED:
            count.answered += 1
            through.append(f"Host {hosts!r}: {status}")
    for origin in HOSTILE_ORIGINS:
        count.attempts += 1
        status, _ = d.status([f"127.0.0.1:{d.port}"], origin=origin, token=d.token)
        if status not in REFUSED:
            count.answered += 1
            through.append(f"Origin {origin!r}: {status}")
    return through


def allowed_ok(d: Door, hosts: list[str]) -> None:
    for host in hosts:
        status, _ = d.status([host], token=d.token)
        assert status == 200, (host, status)


@pytest.mark.parametrize("kind", ["serve", "mcp"])
@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0"])
def test_hostile_host_and_origin_headers_reach_neither_door_however_it_is_bound(
    db: tuple[str, Refs], tmp_path: Path, kind: str, bind: str
) -> None:
    count = Count()
    with door(kind, db[0], bind, tmp=tmp_path) as d:
        through = knock_hostile(d, count)
        out = os.environ.get("THREADLOOM_CORPUS_OUT")
        if out:
            with open(out, "a") as f:
                line = {"corpus": f"Host {kind} {bind}", "attempts": count.attempts}
                f.write(json.dumps({**line, "answered": count.answered, "through": through}))
                f.write("\n")
        assert through == [] and count.attempts == len(hostile_hosts(0)) + len(HOSTILE_ORIGINS)
        allowed = [f"127.0.0.1:{d.port}", f"localhost:{d.port}", "localhost", "[::1]"]
        if bind == "0.0.0.0":
            allowed += [socket.gethostname(), *machine_addresses()]
        allowed_ok(d, allowed)


def test_a_non_loopback_bind_warns_that_every_transcript_is_served_and_how_to_protect_it(
    db: tuple[str, Refs], tmp_path: Path
) -> None:
    with door("serve", db[0], "0.0.0.0", tmp=tmp_path) as d:
        first, warning = d.said[:2]
        assert first == f"threadloom: serving http://0.0.0.0:{d.port}/ (read-only; Ctrl-C stops)"
        assert warning.startswith("threadloom: warning: bound to 0.0.0.0, not the loopback:")
        assert "every transcript" in warning and "--require-token" in warning
        assert socket.gethostname().lower() in warning
        assert d.status([f"{socket.gethostname()}:{d.port}"])[0] == 200  # no token asked
    with door("serve", db[0], "127.0.0.1", tmp=tmp_path) as d:
        assert len(d.said) == 1  # no warning on the loopback


def test_serve_with_a_token_lets_a_browser_in_through_its_link_and_nothing_else(
    db: tuple[str, Refs], tmp_path: Path
) -> None:
    refs = db[1]
    with door("serve", db[0], "0.0.0.0", "--require-token", tmp=tmp_path) as d:
        assert d.token is not None and len(d.token) >= 32
        assert "only requests with the token" in d.said[1] and "unencrypted" in d.said[1]
        host = [f"127.0.0.1:{d.port}"]
        assert d.status(host)[0] == 401
        assert d.status(host, token="wrong")[0] == 401
        assert d.status(host, cookie=f"threadloom_token_{d.port}=wrong")[0] == 401
        assert d.status(host, path=f"/t/{refs.worker}?token=wrong")[0] == 401
        status, headers = d.status(host, path=f"/t/{refs.worker}?token={d.token}&from=1")
        assert status == 303 and headers["location"] == f"/t/{refs.worker}?from=1"
        cookie = headers["set-cookie"].split(";")[0]
        assert cookie == f"threadloom_token_{d.port}={d.token}"
        assert {"HttpOnly", "SameSite=Strict"} <= {
            p.strip() for p in headers["set-cookie"].split(";")
        }
        assert d.status(host, cookie=cookie, path=f"/t/{refs.worker}")[0] == 200
        assert d.status(host, token=d.token)[0] == 200
        assert d.status(["evil.example"], cookie=cookie)[0] == 400  # the token opens no Host


def test_a_token_file_is_used_and_never_printed_and_a_bad_one_is_one_line(
    db: tuple[str, Refs], tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("  s3cret-token-from-a-file-0123  \n")
    with door("serve", db[0], "127.0.0.1", "--token-file", str(token), tmp=tmp_path) as d:
        assert "s3cret" not in "\n".join(d.said) and str(token) in d.said[0]
        assert d.status([f"localhost:{d.port}"], token="s3cret-token-from-a-file-0123")[0] == 200
        assert d.status([f"localhost:{d.port}"])[0] == 401
    short = tmp_path / "short"
    short.write_text("abc")
    for kind, path, says in (
        ("serve", tmp_path / "missing", "cannot read it"),
        ("serve", short, "the token is 3 characters; at least 16"),
        ("mcp", short, "the token is 3 characters; at least 16"),
    ):
        args = ["serve", "--port", "0"] if kind == "serve" else ["mcp", "--http", "127.0.0.1:9"]
        done = run_cli(*args, "--token-file", str(path), db=db[0])
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(f"threadloom: error: --token-file '{path}': ") and says in line


def test_allow_host_adds_a_name_and_a_bad_one_is_one_line(
    db: tuple[str, Refs], tmp_path: Path
) -> None:
    with door("serve", db[0], "0.0.0.0", "--allow-host", "Viewer.LAN", tmp=tmp_path) as d:
        assert d.status([f"viewer.lan:{d.port}"])[0] == 200
        assert d.status([f"other.lan:{d.port}"])[0] == 400
    for bad in ("viewer.lan:8765", "a b", "evil/x"):
        done = run_cli("serve", "--allow-host", bad, "--port", "0", db=db[0])
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            f"threadloom: error: --allow-host {bad!r}: a host name or address, without a port"
        ]
    done = run_cli("mcp", "--allow-host", "x.lan", db=db[0])
    assert done.returncode == 2 and "--allow-host is for --http" in done.stderr
