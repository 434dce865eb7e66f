"""A laboratory for hostile MCP clients: the real ``threadloom mcp`` command, clients that speak
each protocol version the SDK speaks, and the traps that tell whether an attack got through.

- ``RawStdio`` speaks JSON-RPC by hand over the command's stdio, at any protocol version: the
  ``initialize`` handshake of 2024-11-05 … 2025-11-25 (answering the server's ``roots/list``),
  or 2026-07-28's per-request envelope (``_meta`` on every request, ``server/discover``, and an
  ``InputRequiredResult`` answered by retrying with the roots). It is what a client does, with
  nothing of the SDK's client between the test and the wire.
- ``SdkHttp`` is the SDK's own client over streamable HTTP (mode ``legacy`` or 2026-07-28),
  carrying the server's bearer token.
- ``Lab`` builds the world: a client root holding the workspace and a symlink out of it, a
  directory outside it, threads made before the server starts (a job outside the root, one
  inside, one inside whose bash has no sandbox), the server's scripted model (its workers leave
  a marker file where they ran), an attacker's scripted model, and two loopback
  OpenAI-compatible endpoints: one the server allows, one that records every key it is sent.
- ``Lab.attempt`` runs one hostile call and counts what got through, by what it left behind:
  an **escape** is a marker written outside the root, or a run started in a thread that works
  outside it; a **leak** is a request carrying the server's key at the endpoint it was not
  configured for; an **injection** is a run on a model the client chose against the server's
  rule (a scripted model of its own) or a thread stored with a title of more than one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from orchestrator import JobSpec, Orchestrator
from store import Status, Store
from tests.fakes.chat_api import FakeChatAPI

from .conftest import Setup
from .test_e2e import SERVER_START_GUARD_S, child_env, command

CANARY = "sk-canary-0123456789abcdef"
"""The server's OPENAI_API_KEY in the lab: seen anywhere but the allowed endpoint, it leaked."""
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSION = "2026-07-28"
CALL_GUARD_S = 120.0  # a hang guard for one call, not a timing claim
BREAKS = ("\n", "\r", "\u2028", "\x85")


class McpClient(Protocol):
    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        """(is_error, text) of one tool call."""
        ...


# ----------------------------------------------------------------- clients


class RawStdio:
    """A JSON-RPC client over a ``threadloom mcp`` subprocess's stdio, speaking ``version``
    with the ``roots`` capability (answering with ``roots``)."""

    def __init__(self, proc: asyncio.subprocess.Process, version: str, roots: list[str]) -> None:
        self.proc = proc
        self.version = version
        self.roots = roots
        self.modern = version == MODERN_VERSION
        self._next = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())
        self.roots_asked = 0

    @property
    def _meta(self) -> dict[str, Any]:
        return {
            "io.modelcontextprotocol/protocolVersion": self.version,
            "io.modelcontextprotocol/clientInfo": {"name": "hostile", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"roots": {"listChanged": True}},
        }

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        await self.proc.stdin.drain()

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            message = json.loads(line)
            if "method" in message and "id" in message:  # the server asks something
                if message["method"] == "roots/list":
                    self.roots_asked += 1
                    result: dict[str, Any] = {"roots": [{"uri": u} for u in self.roots]}
                else:
                    result = {}
                await self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})
            elif "id" in message and message["id"] in self._waiting:
                self._waiting.pop(message["id"]).set_result(message)
        for waiter in self._waiting.values():
            waiter.set_exception(EOFError("the server closed its stdout"))

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        rid = self._next
        if self.modern:
            params = {**params, "_meta": self._meta}
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = waiter
        await self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return await asyncio.wait_for(waiter, CALL_GUARD_S)

    async def start(self) -> None:
        if self.modern:
            found = await self.request("server/discover", {})
            assert MODERN_VERSION in found["result"]["supportedVersions"], found
            return
        info = {"name": "hostile", "version": "1"}
        caps = {"roots": {"listChanged": True}}
        params = {"protocolVersion": self.version, "capabilities": caps, "clientInfo": info}
        done = await self.request("initialize", params)
        assert done["result"]["protocolVersion"] == self.version, done
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        for _ in range(5):
            reply = await self.request("tools/call", params)
            if "error" in reply:
                return True, str(reply["error"].get("message"))
            result = reply["result"]
            if result.get("resultType") != "input_required":
                text = "".join(c.get("text", "") for c in result.get("content", []))
                return bool(result.get("isError")), text
            answers = {}
            for key, asked in result.get("inputRequests", {}).items():
                assert asked["method"] == "roots/list", asked
                self.roots_asked += 1
                answers[key] = {"roots": [{"uri": u} for u in self.roots]}
            params = {
                "name": tool,
                "arguments": arguments,
                "inputResponses": answers,
                "requestState": result.get("requestState"),
            }
        raise AssertionError(f"{tool}: the server kept asking for input")

    async def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), SERVER_START_GUARD_S)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            self._reader.cancel()


class SdkHttp:
    """The SDK's client over streamable HTTP at ``url`` (mode ``legacy`` or 2026-07-28),
    sending ``token`` as its bearer token and ``roots`` as its roots."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        from mcp.types import TextContent

        result = await self.client.call_tool(tool, arguments)
        text = "".join(c.text for c in result.content if isinstance(c, TextContent))
        return bool(result.is_error), text


@contextlib.asynccontextmanager
async def sdk_http(url: str, *, token: str, mode: str, roots: list[str]) -> AsyncIterator[SdkHttp]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import Implementation, ListRootsResult, Root
    from pydantic import FileUrl

    async def list_roots(_ctx: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=FileUrl(u)) for u in roots])

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=CALL_GUARD_S) as http:
        transport = streamable_http_client(url, http_client=http)
        info = Implementation(name="hostile", version="1")
        client = Client(transport, mode=mode, list_roots_callback=list_roots, client_info=info)
        async with client:
            yield SdkHttp(client)


# ----------------------------------------------------------------- the laboratory


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "input": {"command": command}}]}


def dispatching(*tasks: dict[str, Any]) -> dict[str, Any]:
    """A lead's turn: ``dispatch`` of ``tasks``."""
    return {"tool_calls": [{"name": "dispatch", "input": {"tasks": list(tasks)}}]}


SUBMIT = {"tool_calls": [{"name": "submit_result", "input": {"status": "done", "summary": "ok"}}]}


@dataclass
class Tally:
    attempts: int = 0
    escapes: int = 0
    leaks: int = 0
    injections: int = 0
    controls: int = 0
    through: list[str] = field(default_factory=list)
    """What got through, one line each (the case and what it left)."""

    def as_json(self) -> dict[str, Any]:
        keys = ("attempts", "escapes", "leaks", "injections", "controls")
        return {k: getattr(self, k) for k in keys}


@dataclass
class Lab:
    """The world of one corpus run (the module's docstring). ``root`` is the client's root;
    ``outside`` lies outside it; ``home`` is the server's ``HOME`` (``~``), outside too."""

    base: Path
    evil: FakeChatAPI
    good: FakeChatAPI
    tally: Tally = field(default_factory=Tally)
    refs: dict[str, str] = field(default_factory=dict)
    store: Store | None = None
    """Open while the corpus runs (``opened``): the server process writes, the lab reads."""

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def ws(self) -> Path:
        return self.root / "ws"

    @property
    def outside(self) -> Path:
        return self.base / "outside"

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def db(self) -> Path:
        return self.base / "t.db"

    @property
    def script(self) -> Path:
        return self.base / "server-script.json"

    @property
    def attacker(self) -> Path:
        return self.base / "attacker.json"

    @property
    def model(self) -> str:
        return f"scripted:{self.script}"

    @property
    def evil_model(self) -> str:
        return f"openai:gpt-x@{self.evil.base_url}"

    @property
    def good_model(self) -> str:
        return f"openai:gpt-x@{self.good.base_url}"

    def server_flags(self) -> list[str]:
        return ["--model", self.model, "--allow-endpoint", self.good.base_url]

    def env(self) -> dict[str, str]:
        env = child_env()
        env.update({"OPENAI_API_KEY": CANARY, "HOME": str(self.home)})
        return env

    # -- building ---------------------------------------------------------------------------

    def build(self) -> None:
        for d in (self.ws, self.outside, self.home):
            d.mkdir(parents=True, exist_ok=True)
        (self.root / "link").symlink_to(self.outside, target_is_directory=True)
        out = self.outside
        evil_task = {"title": "e", "prompt": "p", "model": self.evil_model}
        rules = [
            # a lead that does what a client's goal says: dispatch on the client's endpoint
            {"match": "evil-dispatch", "turns": [dispatching(evil_task), {"text": "done"}]},
            {"match": "The job file defines", "turns": [{"text": "report"}]},
            {
                "match": "(?m)^Job: ",
                "turns": [dispatching({"title": "t", "prompt": "p"}), {"text": "report"}],
            },
            {
                "match": "(?m)^Task [^:]*: abs|abs-again",
                "turns": [bash(f"mktemp -p {out} abs-marker-XXXXXX"), SUBMIT],
            },
            {"match": ".", "turns": [bash("mktemp -p . marker-XXXXXX"), SUBMIT]},
        ]
        self.script.write_text(json.dumps({"rules": rules}))
        attacker = [{"match": ".", "turns": [bash("mktemp -p . injected-XXXXXX"), SUBMIT]}]
        self.attacker.write_text(json.dumps({"rules": attacker}))
        self.good.respond_with(
            lambda _req: {
                "tool_calls": [
                    {"name": "submit_result", "arguments": {"status": "done", "summary": "ok"}}
                ]
            }
        )

    async def seed(self) -> None:
        """Threads made before the server starts, as the server's user makes them."""
        async with await Orchestrator.open(str(self.db)) as orch:
            for name, workspace, extra in (
                ("outside", self.outside, {}),
                ("inside", self.ws, {}),
                ("nosandbox", self.ws, {"sandbox": "none"}),
            ):
                spec = JobSpec(
                    name=name,
                    goal="g",
                    workspace=str(workspace),
                    model=self.model,
                    tasks=[{"id": f"{name}-1", "title": "touch", "prompt": "p"}],
                    **extra,
                )
                done = await orch.run_job(spec)
                assert done.status == Status.DONE, done
                self.refs[f"{name}-lead"] = done.lead
                self.refs[f"{name}-worker"] = done.workers[0].ref

    # -- what an attempt leaves ---------------------------------------------------------------

    def markers(self) -> set[Path]:
        found: set[Path] = set()
        for top in (self.base,):
            for path in top.rglob("*"):
                name = path.name
                if name.startswith(("marker-", "abs-marker-", "injected-")):
                    found.add(path)
        return found

    def evil_keys(self) -> int:
        return sum(1 for r in self.evil.requests if CANARY in r.headers.get("authorization", ""))

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[Lab]:
        self.store = await Store.open(str(self.db))
        try:
            yield self
        finally:
            await self.store.close()
            self.store = None

    async def threads(self) -> dict[str, Any]:
        assert self.store is not None, "the lab is not opened"
        return {t.id: t for t in await self.store.list_threads()}

    def within_root(self, path: Path) -> bool:
        real = path.resolve()
        return real == self.root.resolve() or real.is_relative_to(self.root.resolve())

    async def attempt(
        self, client: McpClient, case: str, tool: str, arguments: dict[str, Any]
    ) -> tuple[bool, str]:
        """One hostile call, and what it left counted (``Tally``)."""
        markers, keys, before = self.markers(), self.evil_keys(), await self.threads()
        refused, text = await client.call(tool, arguments)
        await self.settle(before)
        new_markers = self.markers() - markers
        after = await self.threads()
        new = [t for tid, t in after.items() if tid not in before]
        ran = [t for i, t in after.items() if i in before and t.head_seq != before[i].head_seq]
        escaped = [m for m in new_markers if not self.within_root(m)]
        for t in [*new, *ran]:
            if t.status != Status.IDLE and not self.within_root(self.workspace_of(t, after)):
                escaped.append(Path(f"(a run of {t.ref} outside the root)"))
        injected = [m for m in new_markers if m.name.startswith("injected-")]
        chosen = f"scripted:{self.attacker}"
        injected += [Path(f"(a run on {t.model})") for t in [*new, *ran] if t.model == chosen]
        injected += [
            Path(f"(title {t.title!r})") for t in new if any(b in (t.title or "") for b in BREAKS)
        ]
        leaked = self.evil_keys() - keys
        self.tally.attempts += 1
        self.tally.escapes += bool(escaped)
        self.tally.leaks += bool(leaked)
        self.tally.injections += bool(injected)
        for what, found in (("escape", escaped), ("injection", injected)):
            if found:
                self.tally.through.append(f"{case}: {what}: {sorted(map(str, found))[:3]}")
        if leaked:
            self.tally.through.append(f"{case}: leak: {leaked} request(s) carried the key")
        return refused, text

    async def control(self, client: McpClient, case: str, tool: str, args: dict[str, Any]) -> str:
        """A call a client may make: it must work (the corpus is no server refusing all)."""
        refused, text = await client.call(tool, args)
        assert not refused, f"{case}: {text}"
        self.tally.controls += 1
        return text

    def workspace_of(self, info: Any, threads: dict[str, Any]) -> Path:
        task = info.task or {}
        if task.get("workspace"):
            return Path(task["workspace"])
        lead = threads.get(info.job_id)
        job = (lead.task or {}).get("job") if lead is not None else None
        return Path(job["workspace"]) if isinstance(job, dict) else self.base

    async def settle(self, before: dict[str, Any]) -> None:
        """Until every thread started since ``before`` has ended (a refused call starts none):
        a worker an attack got running leaves its marker before it is counted."""
        deadline = time.monotonic() + CALL_GUARD_S
        live: list[Any] = []
        while time.monotonic() < deadline:
            threads = await self.threads()
            live = [t for t in threads.values() if t.status in (Status.QUEUED, Status.RUNNING)]
            if not live:
                return
            await asyncio.sleep(0.1)  # polls the store another process writes: no event to wait on
        shown = [(t.ref, t.kind, t.title, t.status) for t in live]
        raise AssertionError(f"threads still run after the guard: {shown}")


async def start_stdio(lab: Lab, version: str) -> RawStdio:
    program, *args = command_for(lab)
    proc = await asyncio.create_subprocess_exec(
        program,
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(lab.base / f"server-{version}.log").open("w"),
        cwd=lab.ws,
        env=lab.env(),
    )
    client = RawStdio(proc, version, [lab.root.as_uri()])
    await client.start()
    return client


def command_for(lab: Lab, *extra: str) -> list[str]:
    """``threadloom --db LAB mcp`` with the lab's server flags and ``extra``."""
    setup = Setup(root=lab.base, ws=lab.ws, db=lab.db, script=lab.script)
    return command(setup, *lab.server_flags(), *extra)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_start_line(log: Path, proc: subprocess.Popen[Any], find: Callable[[str], Any]) -> Any:
    """What ``find`` makes of the server's stderr once it says something it recognises."""
    deadline = time.monotonic() + SERVER_START_GUARD_S
    while time.monotonic() < deadline:
        found = find(log.read_text())
        if found:
            return found
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)  # polls another process's log: no event to wait on
    raise AssertionError(f"the server never said where it listens: {log.read_text()}")


def write_tally(name: str, tally: Tally) -> None:
    """The counts, for the report: appended to ``$THREADLOOM_CORPUS_OUT`` when it is set."""
    out = os.environ.get("THREADLOOM_CORPUS_OUT")
    if out:
        with open(out, "a") as f:
            f.write(
                json.dumps({"corpus": name, **tally.as_json(), "through": tally.through}) + "\n"
            )
