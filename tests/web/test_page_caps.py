"""Text and thinking blocks are capped on a page like tool output: a 12 MB message makes a
page of tens of kilobytes, head and tail shown, with a link to the whole block (plain text);
the HTML export, which is the record, keeps them whole. The live events render the same."""

from __future__ import annotations

import asyncio
import html
import re
import subprocess
import sys
from pathlib import Path

from starlette.testclient import TestClient

from orchestrator.web import create_app
from store import NewMessage, Status, Store, TextBlock, ThinkingBlock
from tests.orchestrator.test_cli_helpers import clean_env

HUGE = 12_000_000
TEXT = "TEXT-HEAD " + "a long message line, over and over\n" * (HUGE // 35) + "TEXT-TAIL"
THINKING = "THINK-HEAD " + "a long thought " * (HUGE // 15) + "THINK-TAIL"
PAGE_MAX = 200_000  # bytes: the page of a thread whose one message is 24 MB


async def _build(path: Path) -> str:
    async with await Store.open(str(path)) as store:
        t = await store.create_thread(
            kind="worker", status=Status.DONE, messages=[NewMessage.user("write a lot")]
        )
        blocks = [ThinkingBlock(thinking=THINKING, signature="s"), TextBlock(text=TEXT)]
        await store.append(t.id, NewMessage(role="assistant", content=blocks))
        return t.ref


def test_a_huge_text_and_thinking_are_capped_and_linked(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    ref = asyncio.run(_build(db))
    with TestClient(create_app(str(db))) as client:
        page = client.get(f"/t/{ref}")
        assert page.status_code == 200
        assert len(page.content) < PAGE_MAX
        text = page.text
        for mark in ("TEXT-HEAD", "TEXT-TAIL", "THINK-HEAD", "THINK-TAIL"):
            assert mark in text  # head and tail shown
        assert text.count("chars not shown") == 2
        links = [html.unescape(u) for u in re.findall(r'class="whole" href="([^"]+)"', text)]
        assert len(links) == 2
        wholes = {client.get(u).text for u in links}
        assert wholes == {TEXT, THINKING}  # the rest is one link away, whole

        events = client.get(f"/t/{ref}/events", params={"after": 0})  # what a live page gets
        assert events.status_code == 200 and len(events.content) < PAGE_MAX
        assert "TEXT-TAIL" in events.text and events.text.count("chars not shown") == 2
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "--db", str(db), "export", "--format", "html", ref],
        capture_output=True,
        env=clean_env(),
        check=True,
        text=True,
    ).stdout
    assert html.escape(TEXT, quote=False) in out  # the export is the record: whole
    assert "chars not shown" not in out
