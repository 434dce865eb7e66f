"""A reply that repeats itself: the same block of text, back to back, over and over.

A small model falls into a loop — the same paragraph, the same JSON object — and writes it until
the output-token limit; asked to continue, it writes it again. ``repetition(text)`` finds the
longest run of one block repeated back to back, exactly, and says whether it is a loop:

- the block comes back at least ``MIN_TIMES`` times in a row, and
- the run covers at least ``MIN_SPAN`` characters (``MIN_SPAN_SHORT`` for a block shorter than
  ``SHORT_BLOCK``: ``0, 0, 0, …`` in a data table, a ``=====`` rule or a row of dots is honest
  in small amounts, so a short block must run much longer).

What it does not flag, by construction: lines that are alike but not the same (pytest's
``PASSED`` lines, a log's timestamped lines, a markdown table's rows, code), and a block
repeated a few times. What it misses: a loop whose every copy differs (a counter that goes up in
each), which only the output limit then stops (``LoopConfig.max_cutoffs``).

How: a probe (``PROBE`` characters) taken every ``len(text) / PROBES`` characters is looked up
further on with ``str.find``; the gap to a next occurrence is a candidate period, confirmed by
comparing whole blocks forward and back. Linear in the reply with small constants (a 16,000-
character reply takes well under a millisecond when honest, a few when it loops).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_TIMES = 6
MIN_SPAN = 2000
SHORT_BLOCK = 32
MIN_SPAN_SHORT = 4000
PROBE = 32
PROBES = 64
CANDIDATES = 8  # next occurrences of a probe tried as its period


@dataclass(frozen=True, slots=True)
class Repetition:
    """``block`` characters repeated ``times`` times back to back, from ``start``."""

    start: int
    block: int
    times: int

    @property
    def span(self) -> int:
        return self.block * self.times

    @property
    def is_loop(self) -> bool:
        least = MIN_SPAN_SHORT if self.block < SHORT_BLOCK else MIN_SPAN
        return self.times >= MIN_TIMES and self.span >= least

    def describe(self) -> str:
        return f"the model repeated the same {self.block:,}-character block {self.times} times"


def repetition(text: str) -> Repetition | None:
    """The longest back-to-back repetition in ``text`` found from the probes (None: none at
    all). ``.is_loop`` says whether it is a loop to stop."""
    n = len(text)
    if n < 2 * PROBE:
        return None
    step = max(PROBE, n // PROBES)
    best: Repetition | None = None
    start = 0
    while start + PROBE <= n:
        found = _run_at(text, start)
        if found is not None and (best is None or found.span > best.span):
            best = found
        # a probe inside a run found already finds that run again
        end = found.start + found.span if found is not None else 0
        start = max(start + step, end)
    return best


def _run_at(text: str, start: int) -> Repetition | None:
    needle = text[start : start + PROBE]
    at = start
    for _ in range(CANDIDATES):
        at = text.find(needle, at + 1)
        if at < 0:
            return None
        block = at - start
        piece = text[start:at]
        ahead = at
        while text.startswith(piece, ahead):
            ahead += block
        back = start
        while back - block >= 0 and text.startswith(piece, back - block):
            back -= block
        while back > 0 and text[back - 1] == text[back - 1 + block]:  # a copy's tail
            back -= 1
        if back < start:  # copies counted from where the run starts
            piece, ahead = text[back : back + block], back + block
            while text.startswith(piece, ahead):
                ahead += block
        times = (ahead - back) // block
        if times >= 2:
            return Repetition(start=back, block=block, times=times)
    return None
