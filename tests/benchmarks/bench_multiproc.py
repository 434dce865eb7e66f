"""Several processes appending to one SQLite database at once (issue 11; scale-out brings workers
in several processes): the store's appends from 4 processes against 4 processes of raw
``sqlite3`` commits of the same rows on the same file, measured in the same run.

    .venv/bin/python tests/benchmarks/bench_multiproc.py [--quick] [--processes N]

Prints one JSON document on stdout (progress on stderr). Nothing is asserted: the goal is
reported next to the figures (``goal`` / ``meets_goal``) for a person to read.

Every path is durable (WAL + synchronous=FULL, one commit per awaited append, one fdatasync of
the WAL each). Each process appends to its own thread, one message at a time, as fast as it can;
so the processes contend for SQLite's one write lock all the time. What is measured per append
is its latency (the wait for the lock included), and per run the rate of all processes together
from a common start.

The stall: SQLite's busy handler does not queue waiters. A process that finds the write lock
taken sleeps and retries, its sleeps growing 1, 2, 5, 10 … up to 100 ms per retry, while the
holder — committing every few ms — releases and retakes the lock in between; a waiter can lose
every race for most of a second (``raw_sqlite3`` shows it: a few appends wait hundreds of ms
while the median is a few). A fair hand-off bounds the wait of one append by the commits of the
others ahead of it: its fair bound is processes × the p99 latency of one process appending
alone the same way (measured here, on this disk: ``raw_fair_bound_ms``, ``store_fair_bound_ms``).
The goal: no append of the store waits longer than twice its bound (the worst round's ``max_ms``
≤ 2 × ``store_fair_bound_ms``), and contention costs the store no
throughput (N processes together append at least as fast as one alone). The store's cost per
append against raw ``sqlite3`` is ``bench_store.py``'s ``append`` figure, not this one's.

Variants, interleaved in rounds (round robin, medians across rounds), each on a fresh copy of a
migrated database:

- ``raw_sqlite3_1`` / ``raw_sqlite3_N``: ``BEGIN IMMEDIATE``, the message row, its full-text row,
  the thread's head, ``COMMIT`` per message, with the store's PRAGMAs (busy_timeout 30 s);
- ``store_1`` / ``store_N``: ``Store.append`` of one message per call, each awaited;
- ``unqueued_N``: the same with the store's writer queue (``store._engine.WriteQueue``) switched
  off, i.e. SQLite's busy handler alone, as before the queue;
- ``orm_1`` / ``orm_N``: the store with its appends through SQLAlchemy as before the raw
  ``sqlite3`` writer (``store._rawwrite``): the queue taken on the event loop, held until the
  loop has heard of the commit.

Each variant also reports the largest WAL file its processes saw (``wal_max_kb``): SQLite's
automatic checkpoint, run inside the commit that crosses 1000 pages and so inside the queue,
lets the next writer start the WAL over; a checkpoint run beside the writers (as the store once
did, on a thread of its own) never could, and the WAL grew to tens of MB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import fresh_copy, fsync_probe, migrated_template, text  # noqa: E402

from store import NewMessage, Store, _engine  # noqa: E402

STALL_MS = 100.0
"""An append that waited this long waited for SQLite's longest busy-handler sleep."""


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ----------------------------------------------------------------- one process's work


def _wal_size(path: str) -> int:
    """The WAL file's size as this process leaves it (it is never shrunk while open: its
    largest size so far)."""
    with contextlib.suppress(FileNotFoundError):
        return os.stat(path + "-wal").st_size
    return 0


def _raw_child(path: str, n: int, seed: int, barrier: Barrier, out: Any) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("busy_timeout = 30000", "journal_mode = WAL", "synchronous = FULL"):
        conn.execute(f"PRAGMA {pragma}")
    rng = random.Random(seed)
    tid = f"raw{seed:03d}".ljust(26, "0")
    now = dt.datetime.now(dt.UTC).isoformat(" ")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO threads (id, kind, title, status, job_id, tools, version, head_seq,"
        " pending_tool_ids, created_at, updated_at)"
        " VALUES (?, 'worker', '', 'idle', ?, '[]', 1, 0, '[]', ?, ?)",
        (tid, tid, now, now),
    )
    conn.execute("COMMIT")
    bodies = [text(rng, 30) for _ in range(n)]
    latencies: list[float] = []
    barrier.wait()
    start = time.perf_counter()
    for seq, body in enumerate(bodies, 1):
        t0 = time.perf_counter()
        content = json.dumps([{"type": "text", "text": body}], separators=(",", ":"))
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO messages (thread_id, seq, role, content, format, created_at)"
            " VALUES (?, ?, 'user', ?, 1, ?)",
            (tid, seq, content, now),
        )
        conn.execute(
            "INSERT INTO messages_fts (text, thread_id, seq) VALUES (?, ?, ?)", (body, tid, seq)
        )
        conn.execute("UPDATE threads SET head_seq = ? WHERE id = ?", (seq, tid))
        conn.execute("COMMIT")
        latencies.append(time.perf_counter() - t0)
    out.put(
        {"start": start, "end": time.perf_counter(), "latencies": latencies, "wal": _wal_size(path)}
    )
    conn.close()


async def _store_appends(path: str, n: int, seed: int, barrier: Barrier) -> dict[str, Any]:
    store = await Store.open(path)
    try:
        rng = random.Random(seed)
        tid = (await store.create_thread(kind="worker")).id
        msgs = [NewMessage.user(text(rng, 30)) for _ in range(n)]
        latencies: list[float] = []
        barrier.wait()  # every process ready: the timed part starts together
        start = time.perf_counter()
        for m in msgs:
            t0 = time.perf_counter()
            await store.append(tid, m)
            latencies.append(time.perf_counter() - t0)
        end = time.perf_counter()
        return {"start": start, "end": end, "latencies": latencies, "wal": _wal_size(path)}
    finally:
        await store.close()


def _store_child(path: str, n: int, seed: int, barrier: Barrier, out: Any) -> None:
    out.put(asyncio.run(_store_appends(path, n, seed, barrier)))


def _unqueued_child(path: str, n: int, seed: int, barrier: Barrier, out: Any) -> None:
    """The store with its writer queue switched off: SQLite's busy handler alone, as before."""
    from store import _engine

    off = lambda self, where: contextlib.nullcontext()  # noqa: E731
    _engine.Database.write_turn = off  # type: ignore[method-assign]
    _engine.WriteQueue.file = lambda self: None  # type: ignore[method-assign]
    _store_child(path, n, seed, barrier, out)


def _orm_child(path: str, n: int, seed: int, barrier: Barrier, out: Any) -> None:
    """The store with appends through SQLAlchemy (aiosqlite, the writer queue taken on the
    event loop, SQLite's automatic checkpoints), as before the raw sqlite3 writer."""
    from store import _engine

    _engine._raw_writer = lambda path, synchronous: None  # type: ignore[assignment,return-value]
    _store_child(path, n, seed, barrier, out)


CHILDREN = {
    "raw_sqlite3": _raw_child,
    "store": _store_child,
    "unqueued": _unqueued_child,
    "orm": _orm_child,
}


def run_variant(kind: str, path: Path, processes: int, n: int) -> dict[str, Any]:
    """``processes`` processes of ``kind`` appending ``n`` messages each to ``path``."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=CHILDREN[kind], args=(str(path), n, i + 1, barrier, out))
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise RuntimeError(f"{kind} child exited with {p.exitcode}")
    latencies = [x for r in results for x in r["latencies"]]
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "appends": len(latencies),
        "per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(pct(latencies, 0.5) * 1000, 2),
        "p99_ms": round(pct(latencies, 0.99) * 1000, 2),
        "max_ms": round(max(latencies) * 1000, 2),
        "stalls_over_100ms": sum(1 for x in latencies if x * 1000 > STALL_MS),
        "wal_kb": max(r["wal"] for r in results) // 1024,
    }


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each figure across rounds (max_ms and stalls: the worst round too)."""
    keys = ("per_s", "p50_ms", "p99_ms", "max_ms", "stalls_over_100ms")
    out: dict[str, Any] = {"appends_per_round": rounds[0]["appends"]}
    for k in keys:
        out[k] = round(statistics.median(r[k] for r in rounds), 2)
    out["max_ms_worst_round"] = max(r["max_ms"] for r in rounds)
    out["stalls_over_100ms_total"] = sum(r["stalls_over_100ms"] for r in rounds)
    out["wal_max_kb"] = max(r["wal_kb"] for r in rounds)
    out["per_s_each_round"] = [r["per_s"] for r in rounds]
    return out


async def main(*, processes: int, per_process: int, rounds: int) -> dict[str, Any]:
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="tl-bench-mp-"))
    try:
        template = await migrated_template(workdir)
        names = [f"{k}_{p}" for p in (1, processes) for k in ("raw_sqlite3", "store")]
        if hasattr(_engine.Database, "write_turn"):  # the same run without the queue, to compare
            names.append(f"unqueued_{processes}")
        if hasattr(_engine, "_raw_writer"):  # and with appends through SQLAlchemy, as before
            names += ["orm_1", f"orm_{processes}"]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for r in range(rounds):
            for name in names:  # round robin: the machine's drift weighs on every variant
                kind, procs = name.rsplit("_", 1)
                log(f"round {r + 1}/{rounds}: {name}…")
                db = fresh_copy(template, workdir / f"{name}.{r}.db")
                runs[name].append(run_variant(kind, db, int(procs), per_process))
        fig = {name: median_round(v) for name, v in runs.items()}
        many = str(processes)
        raw1, raw_n = fig["raw_sqlite3_1"], fig[f"raw_sqlite3_{many}"]
        store_n = fig[f"store_{many}"]
        raw_bound = round(processes * raw1["p99_ms"], 2)
        store_bound = round(processes * fig["store_1"]["p99_ms"], 2)
        ratio_rate = round(store_n["per_s"] / raw_n["per_s"], 3)
        ratio_scaling = round(store_n["per_s"] / fig["store_1"]["per_s"], 2)
        ratio_max = round(store_n["max_ms_worst_round"] / store_bound, 2)
        return {
            "benchmark": "threadloom store, several processes appending",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": {
                "python": platform.python_version(),
                "sqlite": sqlite3.sqlite_version,
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
                "fdatasync": fsync_probe(workdir),
            },
            "processes": processes,
            "appends_per_process": per_process,
            "rounds": rounds,
            "durability": "WAL + synchronous=FULL everywhere; each append committed when awaited",
            "variants": fig,
            "baseline": f"raw_sqlite3_{many}: {many} processes of BEGIN IMMEDIATE, message, "
            "full-text row, head update, COMMIT per message on the same file (SQLite's busy "
            "handler)",
            "raw_fair_bound_ms": raw_bound,
            "store_fair_bound_ms": store_bound,
            "ratio_store_to_raw_rate": ratio_rate,
            "ratio_raw_max_to_fair_bound": round(raw_n["max_ms_worst_round"] / raw_bound, 2),
            "ratio_store_max_to_fair_bound": ratio_max,
            "ratio_unqueued_max_to_fair_bound": (
                round(fig[f"unqueued_{many}"]["max_ms_worst_round"] / store_bound, 2)
                if f"unqueued_{many}" in fig
                else None
            ),
            "ratio_orm_max_to_fair_bound": (
                round(
                    fig[f"orm_{many}"]["max_ms_worst_round"] / (processes * fig["orm_1"]["p99_ms"]),
                    2,
                )
                if f"orm_{many}" in fig
                else None
            ),
            f"ratio_store_{many}_to_orm_{many}_rate": (
                round(store_n["per_s"] / fig[f"orm_{many}"]["per_s"], 2)
                if f"orm_{many}" in fig
                else None
            ),
            f"ratio_store_{many}_to_store_1_rate": ratio_scaling,
            "goal": "ratio_store_max_to_fair_bound <= 2"
            f" and ratio_store_{many}_to_store_1_rate >= 1",
            "meets_goal": ratio_max <= 2 and ratio_scaling >= 1,
            "runtime_s": round(time.perf_counter() - started, 1),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, to check it runs")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--appends", type=int, default=None, help="per process (default 300)")
    args = parser.parse_args()
    per = args.appends or (40 if args.quick else 300)
    result = asyncio.run(
        main(processes=args.processes, per_process=per, rounds=1 if args.quick else 3)
    )
    print(json.dumps(result, indent=2))
