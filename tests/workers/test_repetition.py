"""The repetition detector (issue 26 item 2) on what a small model really sends when it loops and
on honest output that looks alike: real pytest output, a markdown table, real code, and every long
text of the real agent sessions in ``/work/shared/realsessions`` (tool outputs, logs, replies)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workers._repetition import MIN_SPAN, MIN_TIMES, SHORT_BLOCK, repetition, restarted, restated

REALSESSIONS = Path("/work/shared/realsessions")
ROOT = Path(__file__).resolve().parents[2]

# what Qwen2.5-Coder 0.5B sent as the lead (issue 26): a call to no tool, whose arguments are a
# result it never ran, as a fenced JSON block, repeated until the output limit (4,096 tokens)
BLOCK = (
    "```json\n"
    '{"name": "t", "arguments": {"status": "done", "findings": [{"claim": "The tests passed all'
    ' checks", "evidence": "The test suite ran and every test passed."}], "summary": "All tests'
    ' passed."}}\n```\n\n'
)


def looping(block: str = BLOCK, times: int = 60) -> str:
    return "Here is the result of the task:\n\n" + block * times + block[:97]


def test_the_small_models_repeated_json_block_is_a_loop() -> None:
    found = repetition(looping())
    assert found is not None and found.is_loop
    assert (found.block, found.times) == (len(BLOCK), 60)
    assert found.describe() == f"the model repeated the same {len(BLOCK)}-character block 60 times"


def test_one_line_said_over_and_over_and_a_run_of_one_character_are_loops() -> None:
    line = "I will now run the tests and report the counts.\n"
    assert repetition("Sure.\n" + line * 80).is_loop  # type: ignore[union-attr]
    assert repetition("\n" * 5000).is_loop  # type: ignore[union-attr]


def test_a_block_repeated_a_few_times_or_briefly_is_not_a_loop() -> None:
    found = repetition("intro\n" + BLOCK * 4 + "the end")
    assert found is not None and found.times == 4 and not found.is_loop
    short = "x = [" + "0, " * 200 + "]"  # a short block must run far longer than this
    assert not repetition(short).is_loop  # type: ignore[union-attr]


def _pytest_output(tmp_path: Path) -> str:
    """Real ``pytest -v`` output: 300 alike PASSED lines, 4 failures with tracebacks, warnings."""
    (tmp_path / "test_many.py").write_text(
        "import warnings\nimport pytest\n\n"
        "@pytest.mark.parametrize('n', range(300))\n"
        "def test_n(n):\n    warnings.warn('deprecated thing', DeprecationWarning)\n"
        "    assert n % 97 != 3, f'bad {n}'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "4 failed, 296 passed" in proc.stdout, proc.stdout[-2000:]
    return proc.stdout


def test_real_pytest_output_a_markdown_table_and_code_are_not_loops(tmp_path: Path) -> None:
    out = _pytest_output(tmp_path)
    assert len(out) > MIN_SPAN * 5
    sources = sorted((ROOT / "workers").rglob("*.py"))
    table = "| file | lines | status |\n| --- | ---: | --- |\n" + "".join(
        f"| {p.relative_to(ROOT)} | {len(p.read_text().splitlines())} | ok |\n" for p in sources
    )
    texts = {"pytest": out, "table": table}
    texts |= {str(p.relative_to(ROOT)): p.read_text() for p in sources}
    flagged = {name: r for name, text in texts.items() if (r := repetition(text)) and r.is_loop}
    assert flagged == {}
    # and a reply that quotes the test run, then loops, is caught
    assert repetition("The run said:\n" + out + looping()).is_loop  # type: ignore[union-attr]


def _long_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if len(value) >= 1000:
            yield value
        if value[:1] in "{[":
            try:
                yield from _long_strings(json.loads(value))
            except ValueError:
                pass
    elif isinstance(value, dict):
        for v in value.values():
            yield from _long_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _long_strings(v)


def test_no_long_text_of_the_real_agent_sessions_is_a_loop() -> None:
    if not REALSESSIONS.is_dir():
        pytest.skip(f"{REALSESSIONS} is not on this machine")
    texts = []
    for path in sorted(REALSESSIONS.rglob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                texts.extend(_long_strings(json.loads(line)))
            except ValueError:
                continue
    assert len(texts) > 1000  # tool outputs (grep, test runs, logs), code, replies
    flagged = [(r, t[:200]) for t in texts if (r := repetition(t)) is not None and r.is_loop]
    assert flagged == []
    # the most repeated honest block there (identical grep lines): often enough, far too short
    found = [r for t in texts if (r := repetition(t)) is not None and r.block >= SHORT_BLOCK]
    worst = max(found, key=lambda r: r.times)
    assert worst.times >= MIN_TIMES and worst.span < MIN_SPAN / 2


# ---------------------------------------------------------------- a reply said again at the cut-off

RESTATED = (
    "## Report\n\n- Task `count` (T-01m9x): failed. 39 tests ran, 1 failure and 2 errors, at"
    " T-01m9x#3; the check verified its one claim.\n- Open: the failure and the errors.\n"
)


def test_a_cut_off_reply_said_again_ends_where_the_second_copy_begins() -> None:
    for tail in (0, 40, len(RESTATED) - 1):
        text = "Here is the report.\n\n" + RESTATED * 3 + RESTATED[:tail]
        cut = restated(text)
        assert cut is not None
        assert text[:cut] == "Here is the report.\n\n" + RESTATED, tail


def test_the_copy_is_the_whole_block_not_a_line_said_over_and_over_inside_it() -> None:
    block = "## Report\n" + "- test_x: ran, passed, verified at T-01m9x#3 (unittest)\n" * 6
    text = block * 2 + block[:100]
    cut = restated(text)
    assert cut is not None and text[:cut] == block


def test_honest_cut_off_text_and_short_periods_are_not_restated(tmp_path: Path) -> None:
    steps = "".join(f"step {i}: checked module_{i}.py, {i * 7 % 13} findings\n" for i in range(200))
    assert restated(steps) is None
    assert restated("0, " * 2000) is None  # a short period: the loop detector's business
    assert restated(RESTATED * 2) is None  # said twice but not over RESTATED_AGAIN characters…
    assert restated(RESTATED * 4) is not None  # …and over it
    listing = "".join(f"{i:>6} {'x' * 70}\n" for i in range(300))  # alike lines, never the same
    assert restated(listing) is None


def test_a_continuation_that_begins_the_cut_off_reply_again_is_restarted() -> None:
    long = "".join(f"- finding {i}: module_{i}.py\n" for i in range(100))
    assert restarted(long, "  " + long[:400])
    assert not restarted(long, long[:100])  # too little said the same
    assert not restarted(long, "- finding 100: module_100.py\n")  # went on, as asked


def _assistant_texts(line: str) -> Iterator[str]:
    """The assistant's text blocks of one line of a Claude Code or Codex session file."""
    try:
        record = json.loads(line)
    except ValueError:
        return
    if not isinstance(record, dict):
        return
    kind = record.get("type")
    message = record.get("message") if kind == "assistant" else record.get("payload")
    if kind not in ("assistant", "response_item") or not isinstance(message, dict):
        return
    if message.get("role") != "assistant":
        return
    for block in message.get("content") or []:
        if isinstance(block, dict) and block.get("type") in ("text", "output_text"):
            yield str(block.get("text", ""))


def test_no_reply_of_the_real_agent_sessions_reads_as_restated() -> None:
    if not REALSESSIONS.is_dir():
        pytest.skip(f"{REALSESSIONS} is not on this machine")
    replies = [
        text
        for path in sorted(REALSESSIONS.rglob("*.jsonl"))
        for line in path.read_text(errors="replace").splitlines()
        for text in _assistant_texts(line)
    ]
    assert sum(len(t) >= 320 for t in replies) > 50  # long replies: reports, plans, reviews
    assert [t[:200] for t in replies if restated(t) is not None] == []


def test_one_sentence_said_to_the_limit_is_kept_once() -> None:
    """What the 1.5B lead sent (live, issue 26): one 51-character sentence 39 times and a part,
    2,015 characters — just under the loop detector's span — cut off by the output limit."""
    line = "The test suite failed with 1 failure and 2 errors.\n"
    text = line * 39 + line[:26]
    loop = repetition(text)
    assert loop is not None and not loop.is_loop
    cut = restated(text)
    assert cut is not None and text[:cut] == line


def test_the_demo_leads_report_then_loop_keeps_the_report() -> None:
    """What the 1.5B lead sent on the demo (live, issue 26): three lines, then two of them said
    over 18 times to the output limit — a loop (the thread would fail), and cut off inside it:
    a lead keeps what it said up to where the loop began again."""
    one = "The tokenizer test failed due to an unexpected character '.' at position 1.\n"
    two = (
        "The parser test is failing due to an identical old and new string. The same call has"
        " already been made and has the same output. Use a different call or finish the thread.\n"
    )
    three = (
        "The same call to edit_file with the same input was made 3 times in a row, and the output"
        " is the same. Use the output: make a different call (another tool, or other input), or"
        " finish.\n"
    )
    text = one + two + three + (one + two) * 18 + one[:40]
    loop = repetition(text)
    assert loop is not None and loop.is_loop and loop.block == len(one + two)
    cut = restated(text)
    assert cut is not None and text[:cut] == one + two + three + one + two
