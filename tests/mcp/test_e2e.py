"""The real ``threadloom mcp`` command: over stdio (starts, answers, exits on EOF) and over
streamable HTTP (with DNS-rebinding protection), driven by the SDK's client, the MCP Inspector
CLI and the official conformance suite (both npm tools installed by .ci/run)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters

from orchestrator.cli import main

from ._proxy import bearer_proxy
from .conftest import Setup, data, make_setup, node_tool

SERVER_START_GUARD_S = 120.0  # a hang guard, not a timing claim (bench_mcp.py measures start-up)
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
"""A client's first request on the 2025-06-18 handshake."""


THREADLOOM = Path(sys.executable).with_name("threadloom")  # the installed console script


def command(setup: Setup, *extra: str) -> list[str]:
    """``threadloom --db … mcp …``: the console script, or ``python -m orchestrator`` (the same
    command, SPEC §Command line) where the checkout is not installed."""
    program = [str(THREADLOOM)] if THREADLOOM.exists() else [sys.executable, "-m", "orchestrator"]
    return [*program, "--db", str(setup.db), "mcp", *extra]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9/blocked-by-tests"
    return env


async def test_stdio_the_command_serves_a_dispatch_and_its_wait(setup: Setup) -> None:
    program, *args = command(setup, "--model", setup.model)
    params = StdioServerParameters(
        command=program,
        args=args,
        cwd=str(setup.ws),
        env=child_env(),
    )
    async with Client(params) as c:
        assert c.server_info is not None and c.server_info.name == "threadloom"
        out = data(
            await c.call_tool(
                "dispatch", {"tasks": [{"id": "slow", "title": "s", "prompt": "p"}], "wait_s": 0}
            )
        )
        got = data(await c.call_tool("wait", {"refs": out["pending"], "timeout_s": 30}))
    assert got["workers"][0]["status"] == "done"


def test_stdio_the_command_answers_initialize_and_exits_on_eof(setup: Setup) -> None:
    lines = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    # as a client does: read the answers, then close stdin (the SDK drops a request still in
    # flight when stdin ends, so closing right after writing would race the last answer)
    proc = subprocess.Popen(
        command(setup, "--model", setup.model),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=setup.ws,
        env=child_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in lines))
        proc.stdin.flush()
        replies = [json.loads(proc.stdout.readline()) for _ in range(2)]  # JSON-RPC only
        proc.stdin.close()  # EOF: the server must exit, cleanly
        proc.wait(timeout=SERVER_START_GUARD_S)
        assert proc.stderr is not None
        rest, err = proc.stdout.read(), proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert rest == ""  # nothing else on stdout
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[0]["result"]["serverInfo"]["name"] == "threadloom"
    assert len(replies[1]["result"]["tools"]) == 12


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class HttpServer:
    url: str
    token: str
    port: int
    start: str
    """What it said when it started (its stderr's first line)."""


@contextmanager
def started_http(setup: Setup, *flags: str) -> Iterator[tuple[int, str]]:
    """``threadloom mcp --http 127.0.0.1:PORT FLAGS`` running: its port and the line it said
    when it started. Its log goes to a file (a pipe nobody reads would fill and stall it)."""
    port = free_port()
    log = setup.root / "server.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            command(setup, "--model", setup.model, "--http", f"127.0.0.1:{port}", *flags),
            cwd=setup.ws,
            env=child_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        guard = time.monotonic() + SERVER_START_GUARD_S
        while not (said := log.read_text()).endswith("\n"):
            assert proc.poll() is None, said
            assert time.monotonic() < guard, "the HTTP server never said where it listens"
            time.sleep(0.1)  # polls another process's log: no event to wait on
        yield port, said.splitlines()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def serving_http(setup: Setup) -> Iterator[HttpServer]:
    """``threadloom mcp --http``, running; yields where it said it listens and the token it
    generated and printed."""
    with started_http(setup) as (port, first):
        found = re.fullmatch(
            r"threadloom: serving (http://127\.0\.0\.1:\d+/mcp) \(MCP, streamable HTTP; a token"
            r' is required: send "Authorization: Bearer ([^"]+)"; Ctrl-C stops\)',
            first,
        )
        assert found, first
        yield HttpServer(url=found[1], token=found[2], port=port, start=first)


@pytest.fixture
def http_server(setup: Setup) -> Iterator[HttpServer]:
    with serving_http(setup) as server:
        yield server


@pytest.fixture(scope="module")
def shared_http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """One server for the conformance scenarios and the token's refusals (they only read)."""
    with serving_http(make_setup(tmp_path_factory.mktemp("conformance"))) as server:
        yield server


@asynccontextmanager
async def authorized(server: HttpServer) -> AsyncIterator[Client]:
    """The SDK's client on the server, sending its bearer token."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {server.token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(server.url, http_client=http)) as c,
    ):
        yield c


async def test_http_the_command_serves_streamable_http_to_a_client_with_its_token(
    http_server: HttpServer,
) -> None:
    async with authorized(http_server) as c:
        out = data(
            await c.call_tool(
                "dispatch", {"tasks": [{"id": "a", "title": "a", "prompt": "p"}], "wait_s": 20}
            )
        )
        assert out["workers"][0]["status"] == "done"
        listed = data(await c.call_tool("list_threads", {"job": out["job"]}))
    assert {r["ref"] for r in listed} == {out["job"], out["workers"][0]["ref"]}


def first_request(version: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A client's first request on ``version`` (body, headers): the handshake's initialize, or
    2026-07-28's server/discover in its per-request envelope."""
    accept = {"Accept": "application/json, text/event-stream"}
    if version != "2026-07-28":
        params = {**INITIALIZE["params"], "protocolVersion": version}
        return {**INITIALIZE, "params": params}, accept
    meta = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}
    return body, {**accept, "MCP-Protocol-Version": version, "Mcp-Method": "server/discover"}


VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")


@pytest.mark.parametrize("version", VERSIONS)
def test_http_without_the_token_nothing_is_answered_on_any_protocol_version(
    shared_http_server: HttpServer, version: str
) -> None:
    """No token, a wrong one, another scheme, the bare token, a wrong cookie, the token in the
    query of a POST: 401, whatever the request. With it: answered."""
    http_server = shared_http_server
    body, accept = first_request(version)
    token = http_server.token
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {token[:-1]}"},
        {"Authorization": f"Basic {token}"},
        {"Authorization": token},
        {"Cookie": f"threadloom_token_{http_server.port}=wrong"},
    ):
        refused = httpx.post(http_server.url, json=body, headers={**accept, **headers})
        assert refused.status_code == 401, headers
        assert refused.headers["www-authenticate"].startswith("Bearer")
    on_query = httpx.post(f"{http_server.url}?token={token}", json=body, headers=accept)
    assert on_query.status_code == 401
    mine = {**accept, "Authorization": f"Bearer {token}"}
    ok = httpx.post(http_server.url, json=body, headers=mine)
    assert ok.status_code == 200, ok.text


def test_http_says_where_it_listens_with_a_new_token_each_start(setup: Setup) -> None:
    with serving_http(setup) as first:
        pass
    with serving_http(setup) as second:
        pass
    assert first.token != second.token and len(first.token) >= 32
    assert first.start.startswith("threadloom: serving http://127.0.0.1:")


def test_http_with_a_token_file_takes_that_token_and_never_prints_it(setup: Setup) -> None:
    path = setup.root / "token"
    path.write_text("my-own-token-0123456789\n")
    with started_http(setup, "--token-file", str(path)) as (port, said):
        assert "my-own-token" not in said and str(path) in said
        accept = {"Accept": "application/json, text/event-stream"}
        mine = {**accept, "Authorization": "Bearer my-own-token-0123456789"}
        url = f"http://127.0.0.1:{port}/mcp"
        assert httpx.post(url, json=INITIALIZE, headers=mine).status_code == 200
    assert "my-own-token" not in (setup.root / "server.log").read_text()


def test_http_a_foreign_host_header_is_refused(http_server: HttpServer) -> None:
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 must not reach the server,
    token or not."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {http_server.token}",
    }
    bad = httpx.post(http_server.url, json=body, headers={**headers, "Host": "evil.example:80"})
    assert bad.status_code == 400
    origin = {**headers, "Origin": "http://evil.example"}
    assert httpx.post(http_server.url, json=body, headers=origin).status_code == 403


def run_node(tool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=child_env(),
        timeout=300,
        check=False,
    )


def test_the_mcp_inspector_cli_lists_the_tools_and_calls_one(setup: Setup) -> None:
    inspector = node_tool("mcp-inspector")
    assert inspector is not None
    # the Inspector starts the server with a small environment of its own: pass on where the
    # code is when it is not the installed checkout
    pythonpath = os.environ.get("PYTHONPATH")
    env = ["-e", f"PYTHONPATH={pythonpath}"] if pythonpath else []
    target = [*env, *command(setup, "--model", setup.model)]
    listed = run_node(inspector, "--cli", *target, "--method", "tools/list", cwd=setup.ws)
    assert listed.returncode == 0, listed.stderr
    names = {t["name"] for t in json.loads(listed.stdout)["tools"]}
    assert "dispatch" in names and len(names) == 12
    called = run_node(
        inspector,
        "--cli",
        *target,
        "--method",
        "tools/call",
        "--tool-name",
        "list_threads",
        "--tool-arg",
        "limit=5",
        cwd=setup.ws,
    )
    assert called.returncode == 0, called.stderr
    result: dict[str, Any] = json.loads(called.stdout)
    assert result.get("isError") is not True and result["structuredContent"] == {"result": []}


CONFORMANCE_SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)
"""The scenarios that test a server in general; the rest exercise the reference 'everything'
server's own tools (``test_simple_text``, ``json_schema_2020_12_tool``…), prompts and
resources, which threadloom does not have."""


@pytest.mark.parametrize("scenario", CONFORMANCE_SCENARIOS)
def test_the_official_conformance_suite_passes(
    shared_http_server: HttpServer, scenario: str, tmp_path: Path
) -> None:
    suite = node_tool("conformance")
    assert suite is not None
    server = shared_http_server
    # the suite sends no header of its own: a proxy adds the token, and nothing else
    with bearer_proxy(server.port, server.token) as port:
        url = f"http://127.0.0.1:{port}/mcp"
        run = run_node(suite, "server", "--url", url, "--scenario", scenario, cwd=tmp_path)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    passed = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", report)
    assert passed is not None, report
    assert passed[1] == passed[2] and int(passed[2]) > 0 and passed[3] == "0", report


def run_mcp(setup: Setup, *flags: str) -> subprocess.CompletedProcess[str]:
    """``threadloom mcp FLAGS`` that is expected to stop at once (it is refused)."""
    return subprocess.run(
        command(setup, *flags),
        capture_output=True,
        text=True,
        cwd=setup.ws,
        env=child_env(),
        timeout=SERVER_START_GUARD_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--http", "nope"], "--http 'nope': expected HOST:PORT"),
        (["--http", "127.0.0.1:99999"], "expected HOST:PORT"),
        (["--http", ""], "--http '': expected HOST:PORT"),  # not stdio
        (["--model", "bogus"], "bad model spec 'bogus'"),
    ],
)
def test_bad_flags_are_exit_2_with_one_line(setup: Setup, flags: list[str], says: str) -> None:
    proc = run_mcp(setup, *flags)
    assert proc.returncode == 2 and proc.stdout == ""
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "256.0.0.1"])
def test_http_an_address_it_cannot_listen_on_is_exit_2_with_one_line_and_json(
    setup: Setup, host: str
) -> None:
    """A port in use, a host that does not resolve: ``serve``'s one line and exit 2 (not
    uvicorn's log line and exit 3, SPEC's "not found"), the JSON error with --json, and no
    database created."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_mcp(setup, "--http", f"{host}:{port}", "--json")
    assert proc.returncode == 2, proc.stderr
    (said,) = proc.stderr.strip().splitlines()
    if host == "127.0.0.1":
        assert (
            said
            == f"threadloom: error: mcp: cannot listen on {host}:{port}: Address already in use"
        )
    else:
        assert said.startswith(f"threadloom: error: mcp: cannot resolve host {host!r}: ")
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == 2 and error["message"] == said.removeprefix("threadloom: error: ")
    assert not setup.db.exists()


def test_without_the_mcp_extra_the_command_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "mcp" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "t.db"), "mcp"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "threadloom: error: mcp: the MCP server needs the mcp SDK, not installed: "
        "pip install 'threadloom[mcp]'"
    ]
