"""``read_thread`` clamps ``max_chars`` and says so; ``ask_thread``'s citation check marks what
does not resolve in place and never alters a citation it keeps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.errors import ReadError
from orchestrator.runtime import pages
from orchestrator.runtime.lead_tools import ReadThreadInput, check_citations
from orchestrator.runtime.pages import MIN_MAX_CHARS, read_page
from store import Kind, NewMessage, Store


@pytest.fixture
async def store(tmp_path: Path) -> Store:
    s = await Store.open(str(tmp_path / "t.db"))
    yield s  # type: ignore[misc]
    await s.close()


async def _thread(store: Store, n: int) -> str:
    info = await store.create_thread(kind=Kind.WORKER, title="w")
    for i in range(n):
        msg = NewMessage.user(f"line {i} " + "x" * 300) if i % 2 == 0 else None
        await store.append(info.id, [msg or NewMessage.assistant(f"reply {i}")])
    return info.ref


def test_a_max_chars_below_the_minimum_is_accepted_by_the_tool_schema() -> None:
    assert ReadThreadInput.model_validate({"ref": "T-abcd", "max_chars": 100}).max_chars == 100


async def test_read_page_clamps_a_small_max_chars_and_says_so(store: Store) -> None:
    ref = await _thread(store, 10)
    page = await read_page(store, ref, mode="messages", max_chars=100)
    assert len(page.text) <= MIN_MAX_CHARS
    assert "max_chars 100 is outside 500-100000; this page uses 500" in page.text
    assert page.next_ref is not None  # the rest is a next page away
    plain = await read_page(store, ref, mode="messages", max_chars=800)
    assert "this page uses" not in plain.text


async def test_citations_that_do_not_resolve_are_marked_and_kept_ones_untouched(
    store: Store,
) -> None:
    ref = await _thread(store, 4)
    other = await _thread(store, 2)
    # ids are time-sortable: two made a moment apart share their first characters, so this
    # prefix is ambiguous (it does not resolve) and a substring of every kept citation
    prefix = ref[:8]
    assert other.startswith(prefix)
    text = f"see {ref}#2 and {ref}#3-4, not {ref}#9, nor {prefix}; also {other}#1."
    marked, kept, dropped = await check_citations(store, text)
    assert f"{ref}#2 " in marked and f"{ref}#3-4," in marked and f"{other}#1." in marked
    assert f"{ref}#9 [not found]" in marked
    assert sorted(kept) == sorted([f"{ref}#2", f"{ref}#3-4", f"{other}#1"])
    assert f"{ref}#9" in dropped
    assert f"{prefix} [not found];" in marked
    assert marked.count("[not found]") == len(dropped)


async def test_a_grep_pattern_that_backtracks_for_ever_is_an_error_and_the_loop_runs_on(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_thread's pattern comes from a model or an MCP client: ``(a|aa)+$`` over a line of
    40 a's and a b backtracks for ever. The page's matching is bounded (``GREP_BUDGET_S``) and
    runs off the event loop, so the process's other work goes on meanwhile."""
    monkeypatch.setattr(pages, "GREP_BUDGET_S", 0.5)
    info = await store.create_thread(
        kind=Kind.WORKER, messages=[NewMessage.user("a" * 40 + "b"), NewMessage.assistant("ok")]
    )
    grep = asyncio.create_task(read_page(store, info.ref, mode="grep", pattern="(a|aa)+$"))
    ticks = 0
    while not grep.done():  # the loop keeps running other tasks while the grep matches
        await asyncio.sleep(0.01)
        ticks += 1
    with pytest.raises(ReadError, match=r"took longer than 0\.5 s on T-\w+#1 \(it backtracks"):
        await grep
    assert ticks >= 10
    # a pattern that matches in time still answers
    page = await read_page(store, info.ref, mode="grep", pattern="a+b$")
    assert f"{info.ref}#1:" in page.text


async def test_citations_by_the_end_of_the_id_are_checked_too(store: Store) -> None:
    ref = await _thread(store, 4)
    end = "T-…" + ref[-8:]
    marked, kept, dropped = await check_citations(store, f"see {end}#2 and {end}#9.")
    assert kept == [f"{end}#2"] and dropped == [f"{end}#9"]
    assert marked == f"see {end}#2 and {end}#9 [not found]."
