"""What importing other agents' sessions costs: a synthetic corpus of Claude Code sessions and
Codex rollouts (half each; 200 sessions, 100,000 messages by default) imported into a fresh
SQLite database through ``orchestrator.importers``, then imported again (nothing new: the
idempotent re-import every later run of ``threadloom import`` pays), then again after one session
in ten grew by a turn (sessions grow while people work), against a raw baseline in
the same run: ``json.loads`` of every line of the same files and one ``sqlite3`` row per line
(session, line number, the line's JSON) inserted in one transaction per file, with the same
PRAGMAs (WAL, synchronous=FULL) and an FTS5 index over the line text, as the store keeps one.

    .venv/bin/python tests/benchmarks/bench_import.py [--sessions N] [--messages N]

Prints one JSON document on stdout (progress on stderr); nothing is asserted. Figures:
messages per second for each, their ratio, and each database's size against the source files';
and the peak memory (maximum resident set) of ``threadloom import`` run as a process on the
corpus and on a quarter of it: an import holds one file's sessions at a time, so the peak must
not grow with the corpus (``import_peak_rss_ratio_4x``, near 1; it grew ~4x when every session
was held before writing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.importers import import_sessions  # noqa: E402
from store import Store  # noqa: E402
from tests.importers.fixtures import ClaudeSession, CodexRollout  # noqa: E402

WORDS = [
    "parse",
    "token",
    "buffer",
    "index",
    "retry",
    "cache",
    "merge",
    "branch",
    "commit",
    "fixture",
]


def _text(i: int, n: int = 40) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(n))


def build_corpus(
    root: Path, sessions: int, messages: int
) -> tuple[list[Path], int, list[ClaudeSession | CodexRollout]]:
    """``sessions`` session files holding ``messages`` messages in all: each turn a user prompt,
    an assistant call, its result, an assistant answer (four messages)."""
    per = max(messages // sessions, 4)
    files: list[Path] = []
    builders: list[ClaudeSession | CodexRollout] = []
    total = 0
    for s in range(sessions):
        turns = per // 4
        if s % 2 == 0:
            c = ClaudeSession(root / "claude" / "-home-someone-project", f"cc-{s:04d}")
            for t in range(turns):
                c.user(f"turn {t}: {_text(s + t)}")
                c.call(
                    f"tu-{s}-{t}", "Bash", {"command": f"grep -n {WORDS[t % 10]}"}, msg_id=f"m{t}a"
                )
                c.result(f"tu-{s}-{t}", _text(t, 120))
                c.text(_text(s * t, 60), msg_id=f"m{t}b")
            files.append(c.write())
            builders.append(c)
        else:
            r = CodexRollout(root / "codex", f"019a0000-0000-7000-8000-{s:012d}")
            for t in range(turns):
                r.user(f"turn {t}: {_text(s + t)}")
                r.call(f"call-{s}-{t}", "shell", {"command": ["grep", "-n", WORDS[t % 10]]})
                r.output(f"call-{s}-{t}", _text(t, 120))
                r.say(_text(s * t, 60))
                r.tokens(1000 + t, 50, cached=900, total=(t + 1) * 1050)
            files.append(r.write())
            builders.append(r)
        total += turns * 4
    return files, total, builders


def grow(builders: list[ClaudeSession | CodexRollout], every: int) -> int:
    """One more turn (four messages) in every ``every``-th session: sessions grow as people
    work; returns the messages added."""
    added = 0
    for i, b in enumerate(builders[::every]):
        if isinstance(b, ClaudeSession):
            b.user(f"one more thing {i}")
            b.call(f"more-{i}", "Bash", {"command": "make"}, msg_id=f"more{i}a")
            b.result(f"more-{i}", _text(i, 120))
            b.text(_text(i, 60), msg_id=f"more{i}b")
        else:
            b.user(f"one more thing {i}")
            b.call(f"more-{i}", "shell", {"command": ["make"]})
            b.output(f"more-{i}", _text(i, 120))
            b.say(_text(i, 60))
        b.write()
        added += 4
    return added


async def _import(
    root: Path, db: Path, builders: list[ClaudeSession | CodexRollout]
) -> dict[str, float]:
    store = await Store.open(str(db))
    try:
        start = time.perf_counter()
        report = await import_sessions(store, root)
        first = time.perf_counter() - start
        start = time.perf_counter()
        again = await import_sessions(store, root)
        second = time.perf_counter() - start
        assert sum(w.added for w in again.threads) == 0
        grown = grow(builders, 10)
        start = time.perf_counter()
        third = await import_sessions(store, root)
        after_growth = time.perf_counter() - start
        assert sum(w.added for w in third.threads) == grown
        return {
            "import_s": first,
            "messages": sum(w.added for w in report.threads),
            "reimport_unchanged_s": second,
            "reimport_after_growth_s": after_growth,
            "grown_sessions": len(builders[::10]),
            "grown_messages": grown,
        }
    finally:
        await store.close()


def _baseline(files: list[Path], db: Path) -> float:
    start = time.perf_counter()
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE lines (session TEXT, n INTEGER, data TEXT, PRIMARY KEY (session, n))")
    con.execute("CREATE VIRTUAL TABLE lines_fts USING fts5(text)")
    for f in files:
        rows = []
        for n, line in enumerate(f.read_text(encoding="utf-8").split("\n")):
            if line.strip():
                obj = json.loads(line)
                rows.append((f.stem, n, json.dumps(obj, ensure_ascii=False)))
        con.execute("BEGIN IMMEDIATE")
        con.executemany("INSERT INTO lines VALUES (?, ?, ?)", rows)
        con.executemany("INSERT INTO lines_fts (text) VALUES (?)", [(r[2],) for r in rows])
        con.execute("COMMIT")
    con.close()
    return time.perf_counter() - start


_PEAK = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss_kib(root: Path, db: Path, cwd: Path = ROOT) -> int:
    """The peak resident set (KiB) of ``threadloom import ROOT`` run as a process into ``db``,
    measured by a parent of its own (``RUSAGE_CHILDREN`` of a process that ran only it), with
    the code at ``cwd``."""
    cmd = [sys.executable, "-m", "orchestrator", "--db", str(db), "import", str(root)]
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, *cmd], cwd=cwd, check=True, capture_output=True, text=True
    )
    return int(out.stdout.split()[-1])


def _size(db: Path) -> int:
    return sum(
        p.stat().st_size for p in db.parent.iterdir() if p.name.startswith(db.name) and p.is_file()
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--messages", type=int, default=100_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "corpus"
        files, total, builders = build_corpus(root, args.sessions, args.messages)
        source_bytes = sum(f.stat().st_size for f in files)
        print(
            f"corpus: {len(files)} files, {total} messages, {source_bytes} bytes", file=sys.stderr
        )
        base_db = Path(tmp) / "base" / "lines.db"
        base_db.parent.mkdir()
        base_s = _baseline(files, base_db)
        print(f"baseline: {base_s:.2f} s", file=sys.stderr)
        db = Path(tmp) / "store" / "threads.db"
        db.parent.mkdir()
        quarter = Path(tmp) / "quarter"
        build_corpus(quarter, max(args.sessions // 4, 2), args.messages // 4)
        peak_quarter = peak_rss_kib(quarter, Path(tmp) / "peak-quarter.db")
        peak_whole = peak_rss_kib(root, Path(tmp) / "peak-whole.db")
        print(f"peak rss: {peak_quarter} KiB (1/4), {peak_whole} KiB (whole)", file=sys.stderr)
        got = asyncio.run(_import(root, db, builders))
        first, added = got["import_s"], int(got["messages"])
        print(f"import: {first:.2f} s, again {got['reimport_unchanged_s']:.2f} s", file=sys.stderr)
        out = {
            "benchmark": "import",
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "sessions": len(files),
            "messages": added,
            "source_bytes": source_bytes,
            "import_s": round(first, 3),
            "import_messages_per_s": round(added / first),
            "reimport_unchanged_s": round(got["reimport_unchanged_s"], 3),
            "reimport_after_growth_s": round(got["reimport_after_growth_s"], 3),
            "grown_sessions": int(got["grown_sessions"]),
            "grown_messages": int(got["grown_messages"]),
            "baseline_s": round(base_s, 3),
            "baseline_messages_per_s": round(total / base_s),
            "import_vs_baseline_time": round(first / base_s, 2),
            "db_bytes": _size(db),
            "db_vs_source": round(_size(db) / source_bytes, 2),
            "baseline_db_bytes": _size(base_db),
            "baseline_db_vs_source": round(_size(base_db) / source_bytes, 2),
            "import_peak_rss_mib": round(peak_whole / 1024, 1),
            "import_peak_rss_quarter_mib": round(peak_quarter / 1024, 1),
            "import_peak_rss_ratio_4x": round(peak_whole / peak_quarter, 2),
        }
        print(json.dumps(out))


if __name__ == "__main__":
    main()
