"""``read_thread`` pages past any message larger than a page (issue 23 item 6): a 50,000-character
tool output kept inline (under the 1 MiB stored apart) is read whole at MCP's 20,000 characters a
page, in every mode, by following the ``next`` ref each page names (``T-…#3-@N``). No page says
"read it with a larger max_chars", and no character is skipped or read twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runtime import pages
from orchestrator.runtime.lead_tools import ReadThreadInput, ReadThreadTool
from orchestrator.runtime.pages import Page, read_page
from store import (
    INLINE_LIMIT,
    Kind,
    NewMessage,
    Store,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

PAGE = 20_000  # MCP's largest page
OUTPUT = "".join(f"line {i:05d} of the test log: ok\n" for i in range(1600))  # ~54,000 chars
CALLS = 800  # one assistant turn of 800 calls: an overview line of ~33,000 characters


@pytest.fixture
async def store(tmp_path: Path) -> Store:
    s = await Store.open(str(tmp_path / "t.db"))
    yield s  # type: ignore[misc]
    await s.close()


async def _thread(store: Store) -> str:
    assert PAGE < len(OUTPUT) < INLINE_LIMIT  # larger than a page, yet stored inline
    uses = [
        ToolUseBlock(id=f"tu{i}", name="read_file", input={"path": f"src/module_{i:03d}.py"})
        for i in range(CALLS)
    ]
    info = await store.create_thread(
        kind=Kind.WORKER,
        title="w",
        messages=[
            NewMessage.user("run the tests"),
            NewMessage(role="assistant", content=[ToolUseBlock(id="b", name="bash", input={})]),
            NewMessage(role="user", content=[ToolResultBlock(tool_use_id="b", content=OUTPUT)]),
            NewMessage(role="assistant", content=[TextBlock(text="read them"), *uses]),
            NewMessage(
                role="user",
                content=[ToolResultBlock(tool_use_id=u.id, content="x = 1") for u in uses],
            ),
            NewMessage.assistant("done"),
        ],
    )
    return info.ref


def _body(page: Page) -> str:
    """A page inside one message: its header line, the text, its footer line."""
    return page.text.split("\n", 1)[1].rsplit("\n", 1)[0]


async def _walk(store: Store, ref: str, **kw: object) -> list[Page]:
    """Every page from ``ref`` on, following ``next`` to the end of the range."""
    got: list[Page] = []
    while ref:
        page = await read_page(store, ref, max_chars=PAGE, **kw)  # type: ignore[arg-type]
        assert len(page.text) <= PAGE
        assert "larger max_chars" not in page.text
        got.append(page)
        assert len(got) < 100, "the pages do not advance"
        ref = page.next_ref or ""
    return got


async def _whole_message(store: Store, ref: str, mode: pages.Mode, **kw: object) -> str:
    """Message #n of ``ref`` read page by page (``ref`` names it alone): its whole text."""
    walked = await _walk(store, ref, mode=mode, **kw)
    assert len(walked) > 1  # it did not fit one page
    for page in walked[:-1]:
        assert page.next_ref is not None and "@" in page.next_ref
        assert page.text.endswith(f"next page: {page.next_ref}")
    assert walked[-1].next_ref is None and walked[-1].text.endswith("(end of range)")
    return "".join(_body(p) for p in walked)


@pytest.mark.parametrize("mode", ["messages", "tool_outputs"])
async def test_an_inline_output_larger_than_a_page_is_read_whole_page_by_page(
    store: Store, mode: pages.Mode
) -> None:
    ref = await _thread(store)
    whole = await _whole_message(store, f"{ref}#3", mode)
    assert OUTPUT.rstrip("\n") in whole
    head = f"--- {ref}#3 " + ("user" if mode == "messages" else "tool outputs")
    assert whole.startswith(head)


async def test_grep_lines_longer_than_a_page_are_read_whole(store: Store) -> None:
    ref = await _thread(store)
    whole = await _whole_message(store, f"{ref}#3", "grep", pattern="of the test log")
    lines = whole.split("\n")
    assert len(lines) == 1600 and lines[0].startswith(f"{ref}#3: line 00000")
    assert lines[-1] == f"{ref}#3: line 01599 of the test log: ok"


async def test_an_overview_line_longer_than_a_page_is_read_whole(store: Store) -> None:
    ref = await _thread(store)
    whole = await _whole_message(store, f"{ref}#4", "overview")
    assert whole.startswith(f"{ref}#4 assistant: read them | → read_file(")
    assert whole.count("→ read_file(") == CALLS


@pytest.mark.parametrize("mode", ["messages", "tool_outputs", "overview"])
async def test_reading_a_whole_thread_walks_through_the_large_messages_to_the_end(
    store: Store, mode: pages.Mode
) -> None:
    ref = await _thread(store)
    walked = await _walk(store, ref, mode=mode)
    for page in walked[:-1]:
        assert page.next_ref is not None
    assert walked[-1].next_ref is None and walked[-1].text.endswith("(end of range)")
    text = "".join(p.text for p in walked)
    if mode == "tool_outputs":
        assert text.count("line 01599 of the test log") == 1
    else:
        assert f"{ref}#6 assistant" in text  # the last message was reached
    if mode == "messages":
        assert text.count("line 00800 of the test log") == 1  # read once, none skipped


async def test_a_range_that_ends_inside_a_large_message_reads_on_within_it(store: Store) -> None:
    ref = await _thread(store)
    first = await read_page(store, f"{ref}#2-3", mode="messages", max_chars=PAGE)
    assert first.next_ref == f"{ref}#3"
    walked = await _walk(store, first.next_ref or "", mode="messages")
    assert all(p.next_ref is None or p.next_ref.startswith(f"{ref}#3") for p in walked)
    assert walked[-1].next_ref is None


def test_the_lead_tool_documents_the_next_ref_and_the_offset_form() -> None:
    assert ReadThreadTool.description == pages.READ_THREAD_DESCRIPTION
    ref = ReadThreadInput.model_json_schema()["properties"]["ref"]["description"]
    assert ref == pages.REF_DESCRIPTION
    for text in (pages.READ_THREAD_DESCRIPTION, pages.REF_DESCRIPTION):
        assert "#7-@20000" in text


async def test_mcp_read_thread_reads_a_large_output_whole_through_next(tmp_path: Path) -> None:
    """MCP's ``read_thread`` is the same page code: its 20,000-character pages walk the
    50,000-character output by the ``next`` each answer carries, and its description says how."""
    from orchestrator import Orchestrator
    from orchestrator.mcp import Settings, Threadloom
    from tests.mcp.conftest import client, data, make_setup

    setup = make_setup(tmp_path)
    async with await Orchestrator.open(str(setup.db)) as orch:
        ref = await _thread(orch.store)
        app = Threadloom(orch, Settings(model=setup.model, cwd=setup.ws))
        try:
            async with client(app) as c:
                tool = next(t for t in (await c.list_tools()).tools if t.name == "read_thread")
                assert pages.READ_THREAD_DESCRIPTION in (tool.description or "")
                assert (
                    tool.input_schema["properties"]["ref"]["description"] == pages.REF_DESCRIPTION
                )
                bodies, nxt, calls = [], f"{ref}#3", 0
                while nxt:
                    got = data(
                        await c.call_tool(
                            "read_thread", {"ref": nxt, "mode": "tool_outputs", "max_chars": PAGE}
                        )
                    )
                    assert len(got["text"]) <= PAGE and "larger max_chars" not in got["text"]
                    bodies.append(got["text"].split("\n", 1)[1].rsplit("\n", 1)[0])
                    nxt, calls = got["next"], calls + 1
        finally:
            await app.aclose()
    assert calls == 3
    assert OUTPUT.rstrip("\n") in "".join(bodies)
