"""How fast the web viewer's first screen of a long thread is: a 10,000-message thread (user
text, assistant tool calls, tool outputs of a few hundred lines) served by the real server
(uvicorn on a loopback port) and fetched over HTTP, against a baseline measured in the same
run — the raw ``sqlite3`` select of the same rows (the page's 200 messages) with their JSON
decoded, which no page of them can beat. Also the page in the middle and at the end of the
thread (a seq range is the same cost wherever it is), the job tree and a search. Interleaved
rounds, medians.

    .venv/bin/python tests/benchmarks/bench_web.py [--messages N] [--rounds N]

Prints one JSON document on stdout (progress on stderr); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from orchestrator.web._views import PAGE  # noqa: E402
from store import NewMessage, Store, TextBlock, ToolResultBlock, ToolUseBlock  # noqa: E402
from tests.web._browser import viewer  # noqa: E402

OUTPUT_LINES = 120


def _conversation(n: int) -> list[NewMessage]:
    """``n`` messages: a user message, then (assistant call, user result) pairs, the last
    being assistant text."""
    out = [NewMessage.user("Find out why the parser drops quoted strings.")]
    i = 0
    while len(out) < n - 1:
        call = ToolUseBlock(id=f"c{i}", name="bash", input={"command": f"pytest -q -k case_{i}"})
        think = TextBlock(text=f"Step {i}: running case {i} to narrow the failure down.")
        out.append(NewMessage(role="assistant", content=[think, call]))
        body = "\n".join(
            f"case_{i} line {j}: assert tokens[{j}] == expected" for j in range(OUTPUT_LINES)
        )
        out.append(
            NewMessage(role="user", content=[ToolResultBlock(tool_use_id=f"c{i}", content=body)])
        )
        i += 1
    out.append(NewMessage.assistant("Done: the closing quote was dropped."))
    return out[:n]


async def _build(path: Path, n: int) -> str:
    async with await Store.open(str(path)) as store:
        info = await store.create_thread(
            kind="worker", title="a long thread", messages=_conversation(n)
        )
        return info.ref


def _raw_select(path: Path, thread_id: str, lo: int, hi: int) -> float:
    start = time.perf_counter()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT seq, role, content, created_at FROM messages"
            " WHERE thread_id = ? AND seq BETWEEN ? AND ? ORDER BY seq",
            (thread_id, lo, hi),
        ).fetchall()
        decoded = [json.loads(r[2]) for r in rows]
        assert len(decoded) == hi - lo + 1, len(decoded)
    finally:
        conn.close()
    return time.perf_counter() - start


def _get(client: httpx.Client, url: str) -> tuple[float, int]:
    start = time.perf_counter()
    r = client.get(url)
    elapsed = time.perf_counter() - start
    r.raise_for_status()
    return elapsed, len(r.content)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "threads.db"
        t0 = time.perf_counter()
        ref = asyncio.run(_build(path, args.messages))
        print(f"built {args.messages} messages in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        tid = ref.removeprefix("T-")
        middle = (args.messages // 2) // PAGE * PAGE + 1
        last = (args.messages - 1) // PAGE * PAGE + 1
        pages = {
            "first_screen": f"/t/{ref}",
            "middle_page": f"/t/{ref}?from={middle}",
            "last_page": f"/t/{ref}?from={last}",
            "job_tree": f"/job/{ref}",
            "search": "/search?q=case_4242",
        }
        times: dict[str, list[float]] = {k: [] for k in pages}
        sizes: dict[str, int] = {}
        baseline: list[float] = []
        with viewer(str(path)) as url, httpx.Client(base_url=url, timeout=60) as client:
            for page in pages.values():  # warm: the first request opens the store
                _get(client, page)
            for i in range(args.rounds):
                baseline.append(_raw_select(path, tid, 1, min(PAGE, args.messages)))
                for name, page in pages.items():
                    elapsed, size = _get(client, page)
                    times[name].append(elapsed)
                    sizes[name] = size
                print(f"round {i + 1}/{args.rounds}", file=sys.stderr)
        med = {k: statistics.median(v) for k, v in times.items()}
        base = statistics.median(baseline)
        print(
            json.dumps(
                {
                    "benchmark": "web",
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                    "messages": args.messages,
                    "page_messages": PAGE,
                    "rounds": args.rounds,
                    **{f"{k}_ms": round(v * 1000, 1) for k, v in med.items()},
                    "first_screen_max_ms": round(max(times["first_screen"]) * 1000, 1),
                    "first_screen_bytes": sizes["first_screen"],
                    "baseline_raw_select_ms": round(base * 1000, 2),
                    "first_screen_ratio_vs_raw_select": round(med["first_screen"] / base, 1),
                    "first_screen_under_200ms": med["first_screen"] < 0.2,
                    "note": "server: uvicorn on 127.0.0.1, fetched with httpx, the whole HTML"
                    " received; baseline: sqlite3 select of the page's rows + json.loads",
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
