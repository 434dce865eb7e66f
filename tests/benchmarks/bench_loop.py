"""Worker-runtime benchmarks (issue: the worker runtime). Prints one JSON document.

- loop overhead per turn: a thread of TURNS turns on a zero-latency model calling a no-op tool,
  time per turn as a ratio to the bare store append (one message, one commit) measured in the
  same run on the same kind of database. A turn stores two messages (the assistant turn with its
  usage row, the tool result), so 2.0 would be "nothing but the two appends".
- cache-prefix stability: a 50-turn thread run by the real loop through the real Anthropic SDK
  against the fake Messages API and its prefix-cache simulation; the share of input tokens served
  from cache.

Run: python tests/benchmarks/bench_loop.py
"""

from __future__ import annotations

import asyncio
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import logging

import structlog

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

from store import Kind, NewMessage, Status, Store  # noqa: E402
from workers import Limits, LoopConfig, ModelRequest, ModelResponse, run_thread  # noqa: E402
from workers.providers import FunctionModel, tool_response  # noqa: E402
from workers.tools import Tool, ToolContext, ToolInput, ToolOutput  # noqa: E402

TURNS = 300
APPENDS = 600


class NoopInput(ToolInput):
    pass


class Noop(Tool[NoopInput]):
    name: ClassVar[str] = "noop"
    description: ClassVar[str] = "does nothing"
    Input = NoopInput

    async def run(self, args: NoopInput, ctx: ToolContext) -> ToolOutput:
        return ToolOutput("ok")


async def bare_append_cost(db: str) -> float:
    store = await Store.open(db)
    info = await store.create_thread(kind=Kind.WORKER, messages=[NewMessage.user("x")])
    msg = NewMessage.assistant("a reply of ordinary length " * 4)
    t0 = time.perf_counter()
    for _ in range(APPENDS):
        await store.append(info.id, msg)
    elapsed = time.perf_counter() - t0
    await store.close()
    return elapsed / APPENDS


async def loop_cost(db: str, ws: Path) -> tuple[float, int]:
    store = await Store.open(db)
    info = await store.create_thread(
        kind=Kind.WORKER,
        tools=["noop"],
        system_prompt="bench",
        status=Status.QUEUED,
        messages=[NewMessage.user("go")],
    )
    n = 0

    def reply(request: ModelRequest) -> ModelResponse:
        nonlocal n
        n += 1
        return tool_response(("noop", {}), text="again")

    model = FunctionModel(reply)
    t0 = time.perf_counter()
    outcome = await run_thread(
        store,
        info.id,
        model=model,
        tools=[Noop()],
        workspace=ws,
        config=LoopConfig(limits=Limits(turns=TURNS, time_s=None)),
    )
    elapsed = time.perf_counter() - t0
    await store.close()
    return elapsed / outcome.turns, outcome.turns


def raw_sqlite_commit_cost(path: str) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE m (t TEXT, seq INT, role TEXT, content TEXT, PRIMARY KEY (t, seq))")
    t0 = time.perf_counter()
    for i in range(APPENDS):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO m VALUES ('x', ?, 'assistant', ?)", (i, "c" * 120))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed / APPENDS


async def cache_share(db: str, ws: Path) -> dict[str, Any]:
    from tests.fakes.messages_api import FakeMessagesAPI
    from workers.providers import AnthropicModel
    from workers.tools import build_tools

    store = await Store.open(db)
    (ws / "notes.txt").write_text("some notes\n" * 50)
    info = await store.create_thread(
        kind=Kind.WORKER,
        tools=["read_file", "list_files"],
        system_prompt="You are a careful worker. " * 40,
        status=Status.QUEUED,
        messages=[NewMessage.user("read the notes, repeatedly")],
    )
    turns = 50
    with FakeMessagesAPI() as api:
        count = 0

        def respond(request: dict[str, Any]) -> dict[str, Any]:
            nonlocal count
            count += 1
            if count >= turns:
                return {"content": "finished"}
            return {
                "content": [
                    {"type": "text", "text": f"turn {count}: reading again"},
                    {"type": "tool_use", "name": "read_file", "input": {"path": "notes.txt"}},
                ]
            }

        api.respond_with(respond)
        model = AnthropicModel("claude-sonnet-4-5", api_key="bench", base_url=api.base_url)
        outcome = await run_thread(
            store,
            info.id,
            model=model,
            tools=build_tools(["read_file", "list_files"]),
            workspace=ws,
            config=LoopConfig(limits=Limits(turns=turns + 5, time_s=None)),
        )
        await model.aclose()
        usages = api.usages
        rejected = len(api.rejections)
    await store.close()
    read = sum(u["cache_read_input_tokens"] for u in usages)
    total = sum(
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        for u in usages
    )
    return {
        "turns": outcome.turns,
        "input_tokens_total": total,
        "cache_read_input_tokens": read,
        "cache_read_share": round(read / total, 4) if total else None,
        "goal": ">= 0.9",
        "requests_rejected": rejected,
    }


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = root / "ws"
        ws.mkdir()
        raw = statistics.median(raw_sqlite_commit_cost(str(root / f"raw{i}.db")) for i in range(3))
        append = statistics.median(
            [await bare_append_cost(str(root / f"a{i}.db")) for i in range(3)]
        )
        per_turn, turns = await loop_cost(str(root / "loop.db"), ws)
        cache = await cache_share(str(root / "cache.db"), ws)
    print(
        json.dumps(
            {
                "benchmark": "worker runtime",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "sqlite": sqlite3.sqlite_version,
                "loop_overhead": {
                    "turns": turns,
                    "per_turn_ms": round(per_turn * 1e3, 3),
                    "bare_store_append_ms": round(append * 1e3, 3),
                    "raw_sqlite_commit_ms": round(raw * 1e3, 3),
                    "per_turn_over_bare_append": round(per_turn / append, 2),
                    "note": "a turn = model call + 2 appends (assistant turn with usage row, tool"
                    " result) + a tool run; synchronous=FULL everywhere",
                },
                "cache_prefix_stability": cache,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
