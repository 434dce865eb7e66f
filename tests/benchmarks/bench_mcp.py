"""MCP server benchmarks (issue 12). Prints one JSON document.

- round trips: tool calls per second through the SDK's client against the server object
  in-process (``list_threads`` with ``limit=1``), against the same query through the Python API
  in the same run;
- fan-out: the wall time of dispatch → wait → read_thread for WORKERS workers on the scripted
  model over MCP (in-process), against dispatch → read through the Python API
  (``Orchestrator.dispatch`` + ``read``) in the same run, interleaved rounds, medians;
- start-up: the real ``threadloom mcp`` over stdio, from spawn to the initialize reply (Codex
  gives a server 10 s), against a bare ``python -c pass`` and ``threadloom ls`` in the same run.

Run: python tests/benchmarks/bench_mcp.py [--calls 300 --workers 8 --rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import structlog

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

from mcp import Client  # noqa: E402
from mcp.types import Implementation  # noqa: E402

from orchestrator import Orchestrator  # noqa: E402
from orchestrator.mcp import Settings, Threadloom  # noqa: E402

SUBMIT = {"tool_calls": [{"name": "submit_result", "input": {"status": "done", "summary": "ok"}}]}
RULES = [{"match": "(?m)^Task ", "turns": [SUBMIT]}]


def tasks(n: int, batch: int) -> list[dict[str, Any]]:
    """``n`` tasks of one batch: a task id is unique in its job, across dispatches."""
    return [{"id": f"b{batch}-t{i}", "title": f"task {i}", "prompt": f"part {i}"} for i in range(n)]


async def round_trips(
    orch: Orchestrator, app: Threadloom, calls: int, rounds: int
) -> dict[str, Any]:
    """Batches of ``calls`` MCP calls and ``calls`` API calls, interleaved; median batch."""
    mcp_s, api_s = [], []
    async with Client(app.server, client_info=Implementation(name="bench", version="1")) as c:
        await c.call_tool("list_threads", {"limit": 1})
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(calls):
                result = await c.call_tool("list_threads", {"limit": 1})
                assert not result.is_error
            mcp_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            for _ in range(calls):
                await orch.list_threads(limit=1)
            api_s.append(time.perf_counter() - start)
    m, a = statistics.median(mcp_s), statistics.median(api_s)
    return {
        "calls": calls,
        "rounds": rounds,
        "mcp_calls_per_s": round(calls / m, 1),
        "api_calls_per_s": round(calls / a, 1),
        "mcp_over_api_time": round(m / a, 2),
    }


async def fan_out_mcp(app: Threadloom, n: int, batch: int) -> float:
    async with Client(app.server, client_info=Implementation(name="bench", version="1")) as c:
        start = time.perf_counter()
        args = {"tasks": tasks(n, batch), "wait_s": 0}
        out = (await c.call_tool("dispatch", args)).structured_content
        assert out is not None
        refs = [w["ref"] for w in out["workers"]]
        pending = list(refs)
        while pending:
            got = (await c.call_tool("wait", {"refs": pending, "timeout_s": 50})).structured_content
            assert got is not None
            pending = got["pending"]
        for ref in refs:
            page = await c.call_tool("read_thread", {"ref": ref, "mode": "overview"})
            assert not page.is_error
        return time.perf_counter() - start


async def fan_out_api(orch: Orchestrator, job: str, n: int, batch: int) -> float:
    start = time.perf_counter()
    outcomes = await orch.dispatch(job, tasks(n, batch))
    for o in outcomes:
        await orch.read(f"T-{o.thread_id}", mode="overview")
    return time.perf_counter() - start


def start_up(root: Path, rounds: int) -> dict[str, Any]:
    db = root / "start.db"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }

    def mcp_once() -> float:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "--db", str(db), "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=root,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(init) + "\n")
        proc.stdin.flush()
        reply = proc.stdout.readline()
        took = time.perf_counter() - start
        assert '"serverInfo"' in reply, reply
        proc.stdin.close()
        proc.wait(timeout=60)
        return took

    def run_once(*args: str) -> float:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, *args], cwd=root, check=True, capture_output=True, timeout=60
        )
        return time.perf_counter() - start

    mcp_s, bare_s, ls_s = [], [], []
    for _ in range(rounds):  # interleaved, so a busy moment hits all three alike
        mcp_s.append(mcp_once())
        bare_s.append(run_once("-c", "pass"))
        ls_s.append(run_once("-m", "orchestrator", "--db", str(db), "ls"))
    m, b, ls = (statistics.median(x) for x in (mcp_s, bare_s, ls_s))
    return {
        "mcp_initialize_reply_s": round(m, 3),
        "mcp_initialize_reply_max_s": round(max(mcp_s), 3),
        "python_bare_s": round(b, 3),
        "threadloom_ls_s": round(ls, 3),
        "mcp_over_ls": round(m / ls, 2),
        "codex_start_limit_s": 10,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        script = root / "script.json"
        script.write_text(json.dumps({"rules": RULES}))
        async with await Orchestrator.open(str(root / "b.db")) as orch:
            settings = Settings(model=f"scripted:{script}", cwd=root / "ws", max_parallel=8)
            app = Threadloom(orch, settings)
            try:
                trips = await round_trips(orch, app, args.calls, args.rounds)
                lead = await app.session.lead(app.job_spec("bench-api", root / "ws"))
                mcp_s, api_s = [], []
                for batch in range(args.rounds):
                    mcp_s.append(await fan_out_mcp(app, args.workers, batch))
                    api_s.append(await fan_out_api(orch, lead.ref, args.workers, batch))
            finally:
                await app.aclose()
        m, a = statistics.median(mcp_s), statistics.median(api_s)
        report = {
            "benchmark": "mcp",
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "round_trips": trips,
            "fan_out": {
                "workers": args.workers,
                "rounds": args.rounds,
                "mcp_dispatch_wait_read_s": round(m, 3),
                "api_dispatch_read_s": round(a, 3),
                "mcp_over_api": round(m / a, 2),
            },
            "start_up": start_up(root, args.rounds),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
