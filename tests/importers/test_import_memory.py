"""An import's memory does not grow with what it imports (issue 22, item 12): ``threadloom
import DIR`` run as a real process on a generated directory and on one four times its size;
the peak resident set of each is measured by a parent that ran only it."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks.bench_import import build_corpus, peak_rss_kib


def test_peak_memory_of_an_import_does_not_grow_with_the_directory(tmp_path: Path) -> None:
    small, large = tmp_path / "x1", tmp_path / "x4"
    build_corpus(small, 16, 8_000)
    build_corpus(large, 64, 32_000)
    size = sum(f.stat().st_size for f in large.rglob("*.jsonl"))
    assert size > 4 * 2**20  # enough bytes that holding them all shows
    one = peak_rss_kib(small, tmp_path / "x1.db")
    four = peak_rss_kib(large, tmp_path / "x4.db")
    # holding every session before writing grew the peak by ~16 bytes a source byte (2x here);
    # a file at a time it stays where it was, whatever the directory's size
    assert four < one * 1.3, (one, four, size)
