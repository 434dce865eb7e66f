"""Benchmarks of the thread store (SQLite), each figure set against a baseline measured in the
same run on the same machine.

    /work/venv/bin/python tests/benchmarks/bench_store.py [--quick]

Prints one JSON document on stdout (progress goes to stderr). Nothing here asserts on time: the
goals are reported next to the figures (``goal`` / ``meets_goal``) for a person to read. Each
figure is measured interleaved with its baseline (rounds, round robin) and reported as a median,
so that other load on a shared machine weighs on both sides of a ratio alike.

- append: 32 asyncio writers, each append durable when its await returns (WAL +
  synchronous=FULL everywhere), against raw ``sqlite3`` single-row commits with the same PRAGMAs
  and tables, and against a naive SQLAlchemy async path (one Core transaction per message, no
  group commit).
- fork: time per fork of threads of 10, 10,000 and 100,000 messages, and message rows written.
- read: the last 50 messages of a 100,000-message thread, directly and through a three-deep
  fork chain, against a raw indexed ``SELECT`` of the same rows in the same file.
- search: median latency of a few queries over the 100,000+ messages.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine

from store import (
    NewMessage,
    Store,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageRecord,
)
from store._search import searchable_text
from store._tables import messages as messages_table, threads as threads_table

WRITERS = 32
_VOCABULARY = """
    parser tokenizer lexer grammar token stream buffer index offset cursor module import class
    function method return value error exception traceback assert expected actual failed passed
    test suite fixture config path file line column unicode encoding decode bytes string list
    dict tuple set queue worker lead thread fork resume cache prompt model usage budget report
"""
WORDS = _VOCABULARY.split()


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def conversation(rng: random.Random, n: int, *, start: int = 0) -> list[NewMessage]:
    """``n`` messages of a plausible transcript: user, then (tool call, tool result, …, text)."""
    out: list[NewMessage] = []
    if start == 0:
        out.append(NewMessage.user("Fix the failing parser tests: " + text(rng, 30)))
    i = len(out) + start
    while len(out) < n:
        left = n - len(out)
        if left >= 2:
            tid = f"toolu_{i}"
            out.append(
                NewMessage(
                    role="assistant",
                    content=[
                        TextBlock(text=text(rng, 12)),
                        ToolUseBlock(id=tid, name="grep", input={"pattern": rng.choice(WORDS)}),
                    ],
                )
            )
            result = f"src/{rng.choice(WORDS)}.py:{rng.randint(1, 40)}: " + text(rng, 40)
            if rng.random() < 0.001:
                result += " segfault"
            out.append(
                NewMessage(role="user", content=[ToolResultBlock(tool_use_id=tid, content=result)])
            )
            i += 2
        else:
            out.append(NewMessage.assistant(text(rng, 20)))
            i += 1
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


async def median_of(fn: Callable[[], Awaitable[Any]], runs: int) -> tuple[float, Any]:
    times = []
    result: Any = None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def fsync_probe(directory: Path) -> dict[str, float]:
    path = directory / "fsync.probe"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    times = []
    try:
        for _ in range(200):
            os.write(fd, b"x" * 4096)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return {"p50_ms": ms(pct(times, 0.5)), "p99_ms": ms(pct(times, 0.99))}


async def migrated_template(directory: Path) -> Path:
    path = directory / "template.db"
    store = await Store.open(str(path))
    await store.close()
    return path


def fresh_copy(template: Path, path: Path) -> Path:
    shutil.copyfile(template, path)
    path.chmod(0o600)
    return path


# ----------------------------------------------------------------- append throughput


async def bench_store_appends(path: Path, per_writer: int) -> dict[str, Any]:
    store = await Store.open(str(path))
    rng = random.Random(1)
    try:
        tids = [(await store.create_thread(kind="worker")).id for _ in range(WRITERS)]
        payloads = [[NewMessage.user(text(rng, 30)) for _ in range(per_writer)] for _ in tids]
        latencies: list[float] = []

        async def writer(tid: str, msgs: list[NewMessage]) -> None:
            for m in msgs:
                t0 = time.perf_counter()
                await store.append(tid, m)
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(writer(t, p) for t, p in zip(tids, payloads, strict=True)))
        elapsed = time.perf_counter() - t0
        n = WRITERS * per_writer
        return {
            "messages": n,
            "seconds": round(elapsed, 3),
            "per_s": round(n / elapsed, 1),
            "latency_p50_ms": ms(pct(latencies, 0.5)),
            "latency_p99_ms": ms(pct(latencies, 0.99)),
        }
    finally:
        await store.close()


def bench_raw_commits(path: Path, n: int, *, fts: bool) -> dict[str, Any]:
    """One INSERT (plus, with ``fts``, the full-text row) and one COMMIT per message."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA busy_timeout = 30000")
    rng = random.Random(1)
    tid = "raw" + "0" * 23
    now = dt.datetime.now(dt.UTC).isoformat(" ")
    conn.execute(
        "INSERT INTO threads (id, kind, title, status, job_id, tools, version, head_seq,"
        " pending_tool_ids, created_at, updated_at)"
        " VALUES (?, 'worker', '', 'idle', ?, '[]', 1, 0, '[]', ?, ?)",
        (tid, tid, now, now),
    )
    rows = []
    for seq in range(1, n + 1):
        msg = NewMessage.user(text(rng, 30))
        content = json.dumps([b.model_dump(mode="json") for b in msg.content])
        rows.append((seq, content, searchable_text(msg.content)))
    t0 = time.perf_counter()
    for seq, content, body in rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO messages (thread_id, seq, role, content, format, created_at)"
            " VALUES (?, ?, 'user', ?, 1, ?)",
            (tid, seq, content, now),
        )
        if fts:
            conn.execute(
                "INSERT INTO messages_fts (text, thread_id, seq) VALUES (?, ?, ?)", (body, tid, seq)
            )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return {"messages": n, "seconds": round(elapsed, 3), "per_s": round(n / elapsed, 1)}


async def bench_naive_async(path: Path, per_writer: int) -> dict[str, Any]:
    """What a straightforward async SQLAlchemy app does: 32 tasks, each message its own Core
    transaction (insert message, insert full-text row, bump the head) on the one writer
    connection (pool of 1, BEGIN IMMEDIATE), no batching."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}", pool_size=1, max_overflow=0)

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        for pragma in ("journal_mode = WAL", "synchronous = FULL", "busy_timeout = 30000"):
            dbapi_conn.execute(f"PRAGMA {pragma}")

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    rng = random.Random(1)
    now = dt.datetime.now(dt.UTC)
    tids = [f"naive{i:02d}" + "0" * 19 for i in range(WRITERS)]
    async with engine.begin() as conn:
        for tid in tids:
            await conn.execute(
                threads_table.insert().values(
                    id=tid,
                    kind="worker",
                    title="",
                    status="idle",
                    job_id=tid,
                    tools=[],
                    version=1,
                    head_seq=0,
                    pending_tool_ids=[],
                    created_at=now,
                    updated_at=now,
                )
            )
    fts_insert = sa.text(
        "INSERT INTO messages_fts (text, thread_id, seq) VALUES (:text, :thread_id, :seq)"
    )

    async def writer(tid: str) -> None:
        for seq in range(1, per_writer + 1):
            msg = NewMessage.user(text(rng, 30))
            content = json.dumps([b.model_dump(mode="json") for b in msg.content])
            async with engine.begin() as conn:
                await conn.execute(
                    messages_table.insert().values(
                        thread_id=tid, seq=seq, role="user", content=content, created_at=now
                    )
                )
                await conn.execute(
                    fts_insert, {"text": searchable_text(msg.content), "thread_id": tid, "seq": seq}
                )
                await conn.execute(
                    threads_table.update().where(threads_table.c.id == tid).values(head_seq=seq)
                )

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(t) for t in tids))
    elapsed = time.perf_counter() - t0
    await engine.dispose()
    n = WRITERS * per_writer
    return {"messages": n, "seconds": round(elapsed, 3), "per_s": round(n / elapsed, 1)}


def _turns(rng: random.Random, n: int) -> list[tuple[NewMessage, NewMessage]]:
    """``n`` worker turns: (assistant text + tool_use, user tool_result)."""
    msgs = conversation(rng, 2 * n + 1)[1:]
    return [(msgs[i], msgs[i + 1]) for i in range(0, 2 * n, 2)]


SERIAL_USAGE = UsageRecord(
    model="m", usage=Usage(input_tokens=1200, output_tokens=80), cost_usd=0.001
)


async def bench_store_serial(path: Path, turns: int, *, orm: bool = False) -> dict[str, Any]:
    """One worker's turns as the loop stores them: each append awaited before the next (the
    assistant message with its usage, then the tool results), nothing to group-commit with.
    ``orm``: appends through SQLAlchemy, as before the raw sqlite3 writer."""
    from store import _engine

    raw_writer = _engine._raw_writer
    if orm:
        _engine._raw_writer = lambda path, synchronous: None  # type: ignore[assignment,return-value]
    try:
        store = await Store.open(str(path))
    finally:
        _engine._raw_writer = raw_writer
    try:
        tid = (await store.create_thread(kind="worker", messages=[NewMessage.user("go")])).id
        work = _turns(random.Random(2), turns)
        t0, cpu0 = time.perf_counter(), time.process_time()
        for reply, results in work:
            await store.append(tid, reply, usage=SERIAL_USAGE)
            await store.append(tid, results)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await store.close()
    n = 2 * turns
    return {
        "appends": n,
        "us_per_append": round(wall / n * 1e6, 1),
        "cpu_us_per_append": round(cpu / n * 1e6, 1),
    }


def bench_raw_serial(path: Path, turns: int) -> dict[str, Any]:
    """The same rows with raw ``sqlite3``, one transaction per append: BEGIN IMMEDIATE, the
    message, its full-text row, the thread's head (and the usage row), COMMIT."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode = WAL", "synchronous = FULL", "busy_timeout = 30000"):
        conn.execute(f"PRAGMA {pragma}")
    tid = "rawserial".ljust(26, "0")
    now = dt.datetime.now(dt.UTC).isoformat(" ")
    conn.execute(
        "INSERT INTO threads (id, kind, title, status, job_id, tools, version, head_seq,"
        " pending_tool_ids, created_at, updated_at)"
        " VALUES (?, 'worker', '', 'idle', ?, '[]', 1, 0, '[]', ?, ?)",
        (tid, tid, now, now),
    )
    work = _turns(random.Random(2), turns)
    t0, cpu0 = time.perf_counter(), time.process_time()
    seq = 0
    for pair in work:
        for m in pair:
            seq += 1
            content = json.dumps(
                [b.model_dump(mode="json", exclude_none=True) for b in m.content],
                separators=(",", ":"),
            )
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO messages (thread_id, seq, role, content, format, created_at)"
                " VALUES (?, ?, ?, ?, 1, ?)",
                (tid, seq, m.role, content, now),
            )
            conn.execute(
                "INSERT INTO messages_fts (text, thread_id, seq) VALUES (?, ?, ?)",
                (searchable_text(m.content), tid, seq),
            )
            conn.execute("UPDATE threads SET head_seq = ? WHERE id = ?", (seq, tid))
            if m.role == "assistant":
                conn.execute(
                    "INSERT INTO usage (thread_id, seq, model, input_tokens, output_tokens,"
                    " cache_read_input_tokens, cache_creation_input_tokens, cost_usd,"
                    " created_at) VALUES (?, ?, 'm', 1200, 80, 0, 0, 0.001, ?)",
                    (tid, seq, now),
                )
            conn.execute("COMMIT")
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    conn.close()
    n = 2 * turns
    return {
        "appends": n,
        "us_per_append": round(wall / n * 1e6, 1),
        "cpu_us_per_append": round(cpu / n * 1e6, 1),
    }


async def bench_serial(workdir: Path, template: Path, turns: int, rounds: int) -> dict[str, Any]:
    """The cost of one awaited append (a worker's turn is two), against raw sqlite3 writing
    the same rows, interleaved in rounds; medians. ``cpu`` is the process's CPU time (its
    threads included): the overhead apart from the fdatasync both wait for."""
    store_runs, orm_runs, raw_runs = [], [], []
    for r in range(rounds):
        log(f"serial append round {r + 1}/{rounds}: store, store via SQLAlchemy, raw sqlite3…")
        store_runs.append(
            await bench_store_serial(fresh_copy(template, workdir / f"s{r}.db"), turns)
        )
        orm_runs.append(
            await bench_store_serial(fresh_copy(template, workdir / f"o{r}.db"), turns, orm=True)
        )
        raw_runs.append(bench_raw_serial(fresh_copy(template, workdir / f"r{r}.db"), turns))

    def med(runs: list[dict[str, Any]]) -> dict[str, float]:
        keys = ("us_per_append", "cpu_us_per_append")
        return {k: round(statistics.median(x[k] for x in runs), 1) for k in keys}

    ours, orm, raw = med(store_runs), med(orm_runs), med(raw_runs)
    ratio = round(ours["us_per_append"] / raw["us_per_append"], 2)
    return {
        "appends_per_round": 2 * turns,
        "rounds": rounds,
        "store": {**ours, "us_each_round": [x["us_per_append"] for x in store_runs]},
        "store_via_sqlalchemy": {**orm, "us_each_round": [x["us_per_append"] for x in orm_runs]},
        "raw_sqlite3": {**raw, "us_each_round": [x["us_per_append"] for x in raw_runs]},
        "ratio_store_to_raw_wall": ratio,
        "ratio_store_to_raw_cpu": round(ours["cpu_us_per_append"] / raw["cpu_us_per_append"], 2),
        "ratio_store_via_sqlalchemy_to_raw_wall": round(
            orm["us_per_append"] / raw["us_per_append"], 2
        ),
        "ratio_store_via_sqlalchemy_to_raw_cpu": round(
            orm["cpu_us_per_append"] / raw["cpu_us_per_append"], 2
        ),
        "baseline": "raw_sqlite3: BEGIN IMMEDIATE, message, full-text row, head update (and "
        "the usage row), COMMIT per append, WAL + synchronous=FULL",
        "goal": "ratio_store_to_raw_wall <= 1.5 (an awaited append as cheap as raw sqlite3)",
        "meets_goal": ratio <= 1.5,
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median rate, plus every round's rate."""
    ordered = sorted(runs, key=lambda r: r["per_s"])
    return {**ordered[len(ordered) // 2], "per_s_each_round": [r["per_s"] for r in runs]}


async def bench_appends(
    workdir: Path, template: Path, per_writer: int, rounds: int
) -> dict[str, Any]:
    """Each round runs every path once on a fresh copy of the migrated database, so that
    whatever else the machine does weighs on all of them alike; figures are medians of rounds."""
    n = WRITERS * per_writer
    naive_per_writer = max(5, per_writer // 3)  # the slow path: fewer messages, same rate
    runs: dict[str, list[dict[str, Any]]] = {"store": [], "raw_fts": [], "raw": [], "naive": []}
    for r in range(rounds):
        log(f"append round {r + 1}/{rounds}: store, raw sqlite3, naive SQLAlchemy…")
        db = workdir / f"a{r}"
        runs["store"].append(
            await bench_store_appends(fresh_copy(template, db.with_suffix(".s")), per_writer)
        )
        runs["raw_fts"].append(
            bench_raw_commits(fresh_copy(template, db.with_suffix(".f")), n, fts=True)
        )
        runs["raw"].append(
            bench_raw_commits(fresh_copy(template, db.with_suffix(".r")), n, fts=False)
        )
        runs["naive"].append(
            await bench_naive_async(fresh_copy(template, db.with_suffix(".n")), naive_per_writer)
        )
    ours, raw_fts, raw, naive = (median_run(runs[k]) for k in ("store", "raw_fts", "raw", "naive"))
    ratio = round(ours["per_s"] / raw_fts["per_s"], 3)
    return {
        "writers": WRITERS,
        "rounds": rounds,
        "durability": "WAL + synchronous=FULL for every path; each append committed when awaited",
        "store": ours,
        "raw_sqlite3_insert_fts_commit": raw_fts,
        "raw_sqlite3_insert_commit": raw,
        "naive_sqlalchemy_async": naive,
        "ratio_store_to_raw": ratio,
        "ratio_store_to_raw_without_fts": round(ours["per_s"] / raw["per_s"], 3),
        "ratio_naive_to_raw": round(naive["per_s"] / raw_fts["per_s"], 3),
        "ratio_store_to_naive": round(ours["per_s"] / naive["per_s"], 2),
        "baseline": "raw_sqlite3_insert_fts_commit: one BEGIN IMMEDIATE, message INSERT, "
        "full-text INSERT and COMMIT per message (the store also updates the thread row)",
        "goal": "ratio_store_to_raw >= 0.2",
        "meets_goal": ratio >= 0.2,
    }


# ----------------------------------------------------------------- big threads


async def build_thread(store: Store, n: int, rng: random.Random, *, batch: int = 5000) -> str:
    tid = (await store.create_thread(kind="worker", title=f"{n} messages")).id
    done = 0
    while done < n:
        chunk = conversation(rng, min(batch, n - done), start=done)
        # keep every chunk ending on a complete tool pair so the next one may start anywhere
        await store.append(tid, chunk)
        done += len(chunk)
    return tid


async def count_message_rows(store: Store) -> int:
    rows = await store.db.read(lambda tx: tx.fetchall("SELECT count(*) FROM messages"))
    return int(rows[0][0])


async def bench_forks(store: Store, threads: dict[int, str], runs: int) -> dict[str, Any]:
    rows_before = await count_message_rows(store)
    times: dict[int, list[float]] = {n: [] for n in threads}
    for _ in range(runs):  # round robin over the sizes: drift in the machine's load hits all
        for n, tid in threads.items():
            t0 = time.perf_counter()
            await store.fork(tid)
            times[n].append(time.perf_counter() - t0)
    rows_written = await count_message_rows(store) - rows_before
    per_size: dict[str, Any] = {}
    for n, tid in threads.items():
        head = (await store.get_thread(tid)).head_seq
        per_size[str(n)] = {"head": head, "fork_median_ms": ms(statistics.median(times[n]))}
    big, small = statistics.median(times[max(threads)]), statistics.median(times[min(threads)])
    ratio = round(big / small, 3)
    return {
        "forks_per_size": runs,
        "sizes": per_size,
        "ratio_100k_to_10": ratio,
        "message_rows_written_by_forks": rows_written,
        "goal": "ratio_100k_to_10 <= 1.2 and no message rows written",
        "meets_goal": ratio <= 1.2 and rows_written == 0,
    }


async def bench_reads(store: Store, path: Path, big: str, runs: int) -> dict[str, Any]:
    rng = random.Random(7)
    head = (await store.get_thread(big)).head_seq
    # a three-deep fork chain whose last 50 messages span all four segments
    at = head - 20
    if (await store.message(big, at)).tool_uses():
        at -= 1  # never between a tool_use and its result
    f1 = await store.fork(big, at=at, messages=conversation(rng, 6, start=at))
    f2 = await store.fork(f1.id, messages=conversation(rng, 6, start=f1.head_seq))
    f3 = await store.fork(f2.id, messages=conversation(rng, 6, start=f2.head_seq))
    chain_head = f3.head_seq

    async def direct() -> Any:
        return await store.messages(big, start=head - 49)

    async def via_chain() -> Any:
        return await store.messages(f3.id, start=chain_head - 49)

    conn = sqlite3.connect(path)
    sql = (
        "SELECT thread_id, seq, role, content, created_at FROM messages"
        " WHERE thread_id = :t AND seq BETWEEN :a AND :b ORDER BY seq"
    )
    params = {"t": big, "a": head - 49, "b": head}

    def raw() -> list[Any]:
        return conn.execute(sql, params).fetchall()

    def raw_json() -> list[Any]:
        return [(*r[:3], json.loads(r[3]), r[4]) for r in raw()]

    from store.models import validate_blocks

    contents = [r[3] for r in raw()]

    def validate() -> Any:
        return [validate_blocks(json.loads(c)) for c in contents]

    # what one read transaction costs through SQLAlchemy's async engine and aiosqlite, and the
    # same SELECT through it (no model validation)
    async def empty_read() -> Any:
        async with store.db.reader.connect() as c, c.begin():
            return await c.scalar(sa.text("SELECT 1"))

    async def sa_rows() -> Any:
        async with store.db.reader.connect() as c, c.begin():
            return (await c.execute(sa.text(sql), params)).all()

    got, got_chain = await direct(), await via_chain()  # warm caches
    assert [m.seq for m in got] == list(range(head - 49, head + 1))
    assert len({m.thread_id for m in got_chain}) == 4 and len(got_chain) == 50
    timings: dict[str, list[float]] = {
        k: [] for k in ("direct", "chain", "raw", "raw_json", "validate", "empty", "sa")
    }
    for _ in range(runs):  # interleaved, so that load drift weighs on every variant alike
        for key, fn in (
            ("direct", direct),
            ("chain", via_chain),
            ("empty", empty_read),
            ("sa", sa_rows),
        ):
            t0 = time.perf_counter()
            await fn()
            timings[key].append(time.perf_counter() - t0)
        for key, sync_fn in (("raw", raw), ("raw_json", raw_json), ("validate", validate)):
            t0 = time.perf_counter()
            sync_fn()
            timings[key].append(time.perf_counter() - t0)
    conn.close()
    med = {k: statistics.median(v) for k, v in timings.items()}
    t_direct, t_chain, t_raw = med["direct"], med["chain"], med["raw"]
    t_raw_json, t_validate, t_empty, t_sa = (
        med["raw_json"],
        med["validate"],
        med["empty"],
        med["sa"],
    )

    ratio = round(t_direct / t_raw, 2)
    return {
        "thread_messages": head,
        "rows": 50,
        "runs": runs,
        "direct_median_ms": ms(t_direct),
        "fork_chain_3_deep_median_ms": ms(t_chain),
        "raw_sqlite3_select_median_ms": ms(t_raw),
        "raw_sqlite3_select_plus_json_loads_median_ms": ms(t_raw_json),
        "pydantic_validation_of_50_median_ms": ms(t_validate),
        "empty_read_transaction_median_ms": ms(t_empty),
        "same_select_through_sqlalchemy_async_median_ms": ms(t_sa),
        "ratio_direct_to_raw": ratio,
        "ratio_chain_to_raw": round(t_chain / t_raw, 2),
        "ratio_chain_to_direct": round(t_chain / t_direct, 2),
        "goal": "ratio_direct_to_raw <= 3",
        "meets_goal": ratio <= 3,
    }


async def bench_search(store: Store, big: str, total: int, runs: int) -> dict[str, Any]:
    job = (await store.get_thread(big)).job_id
    queries = {
        "common word": ("parser", None),
        "two words": ("tokenizer traceback", None),
        "phrase": ('"unicode encoding"', None),
        "file:line": ("parser.py:12", None),
        "rare word": ("segfault", None),
        "no hit": ("zzyzx", None),
        "within one job": ("lexer", job),
    }
    out: dict[str, Any] = {}
    for name, (q, job_id) in queries.items():
        median, hits = await median_of(functools.partial(store.search, q, job_id=job_id), runs)
        out[name] = {"query": q, "median_ms": ms(median), "hits": len(hits)}
    return {"messages_indexed": total, "limit": 20, "runs": runs, "queries": out}


# ----------------------------------------------------------------- main


async def main(quick: bool, *, append_only: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="tl-bench-"))
    try:
        template = await migrated_template(workdir)
        result: dict[str, Any] = {
            "benchmark": "threadloom store",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": {
                "python": platform.python_version(),
                "sqlite": sqlite3.sqlite_version,
                "sqlalchemy": sa.__version__,
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
                "fdatasync": fsync_probe(workdir),
            },
        }
        result["append"] = await bench_appends(
            workdir, template, 10 if quick else 40, rounds=1 if quick else 3
        )
        result["append_serial"] = await bench_serial(
            workdir, template, 50 if quick else 300, rounds=1 if quick else 3
        )
        if append_only:
            return result

        sizes = [10, 1_000, 5_000] if quick else [10, 10_000, 100_000]
        path = fresh_copy(template, workdir / "big.db")
        store = await Store.open(str(path))
        try:
            rng = random.Random(3)
            threads: dict[int, str] = {}
            t0 = time.perf_counter()
            for n in sizes:
                log(f"building a thread of {n} messages…")
                threads[n] = await build_thread(store, n, rng)
            build_s = time.perf_counter() - t0
            total = sum(sizes)
            result["build"] = {
                "messages": total,
                "seconds": round(build_s, 2),
                "per_s": round(total / build_s, 1),
                "how": "store.append in batches of 5,000 messages per call",
            }
            log("forks…")
            result["fork"] = await bench_forks(store, threads, 7 if quick else 15)
            log("reads…")
            result["read"] = await bench_reads(
                store, path, threads[max(sizes)], 30 if quick else 200
            )
            log("search…")
            result["search"] = await bench_search(
                store, threads[max(sizes)], total, 5 if quick else 15
            )
        finally:
            await store.close()
        result["runtime_s"] = round(time.perf_counter() - started, 1)
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, to check it runs")
    parser.add_argument("--append-only", action="store_true", help="the append figures alone")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.quick, append_only=args.append_only)), indent=2))
