"""A reply that repeats itself: the same block of text, back to back, over and over; and a
model that makes the same tool call again and again.

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

A reply cut off while it says its piece again (``restated(text)``): the 1.5B model of issue 26,
as the lead, wrote a good report, then the same report again, and again, until the output limit
— two or three copies a reply, under ``MIN_TIMES``. A reply that hit the output limit and *ends*
inside a run of one block (``RESTATED_BLOCK`` characters or more) repeated back to back, at
least ``RESTATED_AGAIN`` characters of it said twice, has said its piece once: it is read as
ending where the second copy begins (the stored reply is kept whole). A reply asked to continue
that begins again with what the cut-off reply began with (``restarted``) is the same loop
seen across two replies.

A call made again and again (``repeated_calls(history)``): a small model at temperature 0 copies
its previous turn — the 0.5B model of issue 26, constrained to real tools, read the workspace
directory 12 times, told each time it is a directory. A call is *repeated* when the turns just
before it, with only their tool results between (no user text), each made a call of the same
name and input. The call made ``CALL_REFUSED_AT`` turns in a row is not run: it is
answered with a tool error saying the model already has that output, and where (a model that
re-runs a flaky test once is not refused). A call made again after that (``CALL_STOPPED_AT``)
stops the run. ``submit_result`` is never counted: its own bounds apply (a result sent back
once may come back unchanged). It looks back only as far as the run of calls goes, so a turn
costs the same at message 20 and at message 20,000.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass

from store import Message, TextBlock, ToolUseBlock, format_ref

from ._results import SUBMIT_RESULT

MIN_TIMES = 6
MIN_SPAN = 2000
SHORT_BLOCK = 32
MIN_SPAN_SHORT = 4000
PROBE = 32
PROBES = 64
CANDIDATES = 8  # next occurrences of a probe tried as its period
CALL_REFUSED_AT = 3  # the same call this many times in a row: not run, the model is told
CALL_STOPPED_AT = 4  # and once more after being told: the run stops
NOT_COUNTED = frozenset({SUBMIT_RESULT})  # bounded by ``LoopConfig.max_invalid_submissions``
RESTATED_BLOCK = 64  # a shorter period at the cut-off is a row of dots or zeros: ``repetition``'s
RESTATED_AGAIN = 256  # characters of the block said a second time, at least
RESTARTED = 256  # a continuation beginning with this many characters of the cut-off reply
STOPPED_CALL = "not run: the thread was stopped (the same call, turn after turn)"


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


def restated(text: str) -> int | None:
    """Where the second copy begins when ``text`` (a reply cut off by the output limit) ends
    inside a run of one block said again back to back (the module docstring); None otherwise.
    The period is found from the last ``PROBE`` characters: each earlier occurrence, nearest
    first, is a candidate; of those whose run reaches far enough back, the longest run wins (a
    line said six times inside a block said twice is not the block)."""
    n = len(text)
    if n < RESTATED_BLOCK + RESTATED_AGAIN:
        return None
    needle = text[n - PROBE :]
    at = n - PROBE
    best: tuple[int, int] | None = None  # (where the run begins, period)
    for _ in range(CANDIDATES):
        at = text.rfind(needle, 0, at + PROBE - 1)
        if at < 0:
            break
        period = n - PROBE - at
        if period < RESTATED_BLOCK:
            continue
        begin = _periodic_from(text, period)
        if n - begin - period >= RESTATED_AGAIN and (best is None or begin < best[0]):
            best = (begin, period)
    if best is None:
        return None
    begin, period = best
    period = _smallest_period(text[begin : begin + period])  # one line said 39 times: the line
    # where one copy ends is ambiguous by a rotation: "…done.\n" + "…done.\n" may read as
    # "…done" + ".\n…done": the cut moves on to the next line start within the block, if any
    line = text.find("\n", begin + period - 1, begin + 2 * period - 1)
    return line + 1 if line >= 0 else begin + period


def _smallest_period(block: str) -> int:
    """The shortest ``d`` such that ``block`` is one piece of ``d`` characters said over."""
    n = len(block)
    for d in range(1, n // 2 + 1):
        if n % d == 0 and block[d:] == block[:-d]:
            return d
    return n


def _periodic_from(text: str, period: int) -> int:
    """The first index from which ``text`` repeats itself with ``period`` to its end."""
    j = len(text) - period - 1
    while j >= 0 and text[j] == text[j + period]:
        j -= 1
    return j + 1


def restarted(previous: str, reply: str) -> bool:
    """``reply``, asked to continue the cut-off ``previous``, began it again instead."""
    said = previous.strip()[:RESTARTED]
    return len(said) == RESTARTED and reply.strip().startswith(said)


@dataclass(frozen=True, slots=True)
class RepeatedCall:
    """A call of ``name`` made ``times`` times in a row with the same input; the newest earlier
    one's output is stored at ``output_ref``."""

    name: str
    times: int
    output_ref: str

    @property
    def stops(self) -> bool:
        return self.times >= CALL_STOPPED_AT

    def refusal(self) -> str:
        """The tool error that answers the call instead of its output."""
        return (
            f"not run: you made this same call ({self.name} with the same input) {self.times}"
            f" times in a row, and you already have its output at [{self.output_ref}]. Running"
            " it again gives the same output. Use that output: make a different call (another"
            " tool, or other input), or finish. The same call once more stops your thread."
        )

    def describe(self) -> str:
        return f"the model made the same call ({self.name}) {self.times} times in a row"


def call_key(use: ToolUseBlock) -> tuple[str, str]:
    """What makes two calls the same: the name and the input, key order aside."""
    return use.name, json.dumps(use.input, sort_keys=True, ensure_ascii=False)


def repeated_calls(history: Sequence[Message]) -> dict[str, RepeatedCall]:
    """The calls of the newest message of ``history`` (an assistant turn) made at least
    ``CALL_REFUSED_AT`` turns in a row, by tool-use id (the module docstring)."""
    if not history or history[-1].role != "assistant":
        return {}
    found: dict[str, RepeatedCall] = {}
    for use in history[-1].content:
        if isinstance(use, ToolUseBlock) and use.name not in NOT_COUNTED:
            times, ref = _made_before(history, call_key(use))
            if times + 1 >= CALL_REFUSED_AT:
                found[use.id] = RepeatedCall(use.name, times + 1, ref)
    return found


def _made_before(history: Sequence[Message], key: tuple[str, str]) -> tuple[int, str]:
    """How many turns just before the newest one made the call ``key``, and the ref of the
    message holding the newest one's output. The walk back goes through tool results only: it
    stops at a turn without that call, or at a user message that says something."""
    times, ref, answered = 0, "", ""
    for message in itertools.islice(reversed(history), 1, None):  # no copy of a long history
        if message.role == "user":
            if any(isinstance(b, TextBlock) and b.text.strip() for b in message.content):
                break
            answered = format_ref(message.thread_id, message.seq)
            continue
        if not any(isinstance(b, ToolUseBlock) and call_key(b) == key for b in message.content):
            break
        times += 1
        ref = ref or answered
    return times, ref
