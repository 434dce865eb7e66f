"""What storing a huge tool output whole costs: a 100 MB output appended through the store (from
an ``OutputFile``, as ``bash`` hands it over: chunked, hashed, in the append's transaction) and
read back whole (``Store.output_pieces``), against a raw ``sqlite3`` baseline writing the same
bytes as one blob in one transaction, with the same PRAGMAs (WAL, synchronous=FULL), and reading
that blob back — measured in the same run, interleaved, medians.

    .venv/bin/python tests/benchmarks/bench_outputs.py [--size-mb N] [--rounds N]

Prints one JSON document on stdout (progress on stderr); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from store import NewMessage, OutputFile, Store, ToolResultBlock, ToolUseBlock  # noqa: E402


def _payload_file(size: int) -> OutputFile:
    f = OutputFile()
    block = b"a" * (1 << 20)
    left = size
    while left > 0:
        f.write(block[: min(left, len(block))])
        left -= len(block)
    f.write(b"\nEND-MARKER\n")
    return f


async def _store_round(directory: Path, size: int) -> tuple[float, float]:
    store = await Store.open(str(directory / "threads.db"))
    try:
        t = await store.create_thread(kind="worker", messages=[NewMessage.user("go")])
        call = ToolUseBlock(id="c1", name="bash", input={"command": "x"})
        await store.append(t.id, NewMessage(role="assistant", content=[call]))
        f = _payload_file(size)
        msg = NewMessage(role="user", content=[ToolResultBlock(tool_use_id="c1")])
        start = time.perf_counter()
        await store.append(t.id, msg, output_files={"c1": f})
        wrote = time.perf_counter() - start
        f.close()
        start = time.perf_counter()
        total = 0
        async for piece in store.output_pieces(t.id, 3, "c1"):
            total += len(piece)
        read = time.perf_counter() - start
        assert total == size + len("\nEND-MARKER\n"), total
        return wrote, read
    finally:
        await store.close()


def _raw_round(directory: Path, size: int) -> tuple[float, float]:
    conn = sqlite3.connect(directory / "raw.db", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        f = _payload_file(size)
        data = b"".join(f.chunks())  # the baseline gets its bytes in memory, for free
        f.close()
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO blobs (id, data) VALUES (1, ?)", (data,))
        conn.execute("COMMIT")
        wrote = time.perf_counter() - start
        del data
        start = time.perf_counter()
        (back,) = conn.execute("SELECT data FROM blobs WHERE id = 1").fetchone()
        text = bytes(back).decode("utf-8")
        read = time.perf_counter() - start
        assert len(text) == size + len("\nEND-MARKER\n")
        return wrote, read
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    size = args.size_mb * 1024 * 1024
    ours: list[tuple[float, float]] = []
    raw: list[tuple[float, float]] = []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            ours.append(asyncio.run(_store_round(Path(tmp), size)))
        with tempfile.TemporaryDirectory() as tmp:
            raw.append(_raw_round(Path(tmp), size))
        print(f"round {i + 1}/{args.rounds}: store {ours[-1]}, raw {raw[-1]}", file=sys.stderr)
    store_write = statistics.median(w for w, _ in ours)
    store_read = statistics.median(r for _, r in ours)
    raw_write = statistics.median(w for w, _ in raw)
    raw_read = statistics.median(r for _, r in raw)
    print(
        json.dumps(
            {
                "benchmark": "outputs",
                "python": platform.python_version(),
                "size_bytes": size + len("\nEND-MARKER\n"),
                "rounds": args.rounds,
                "store_write_s": round(store_write, 4),
                "store_read_s": round(store_read, 4),
                "raw_sqlite_blob_write_s": round(raw_write, 4),
                "raw_sqlite_blob_read_s": round(raw_read, 4),
                "write_ratio_vs_raw": round(store_write / raw_write, 2),
                "read_ratio_vs_raw": round(store_read / raw_read, 2),
                "note": "store: 1 MiB chunks streamed from a file, sha256, one transaction;"
                " raw: one in-memory blob, one INSERT",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
