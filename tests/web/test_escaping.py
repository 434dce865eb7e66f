"""Transcript text is always escaped: hostile text (markup, attribute breakers, ANSI escapes,
NUL, a lone CR, bidi overrides, lone surrogates) reaches the page as text, never as markup, and
its invisible characters are drawn."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.testclient import TestClient

from orchestrator.web._templates import render
from orchestrator.web._text import shown
from orchestrator.web._views import message_views
from store import Message, Store, TextBlock

from ._data import Refs

LIVE_MARKUP = (
    "<script>alert",
    "<img src=x",
    "<b>bold</b>",
    "</pre></details>",
    "\x1b",
    "\x00",
    "\u202e",
)


def assert_inert(html: str) -> None:
    for bad in LIVE_MARKUP:
        assert bad not in html, f"{bad!r} reached the page"
    assert "onerror=alert(1)&gt;" in html or "onerror=alert(1)>" not in html
    assert html.count("<script") == html.count('<script src="/static/live.js" defer></script>')


def test_hostile_text_in_every_block_and_the_title_is_escaped(
    client: TestClient, refs: Refs
) -> None:
    r = client.get(f"/t/{refs.hostile}")
    assert r.status_code == 200
    html = r.text
    assert_inert(html)
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html  # the attribute breaker
    assert "&lt;script&gt;alert(&#39;title&#39;)&lt;/script&gt;^[[2J" in html  # the title
    assert "^[[31mred^[[0m" in html and "nul:^@:" in html and "cr:^M:" in html
    assert "bidi:\\u202eevil\\u202c" in html


@pytest.mark.parametrize("page", ["/", "/search?q=pwned", "/job/{ref}"])
def test_hostile_text_is_escaped_in_the_list_search_and_tree(
    client: TestClient, refs: Refs, page: str
) -> None:
    html = client.get(page.format(ref=refs.hostile)).text
    assert_inert(html)
    assert "alert(" in html  # it is there, as text


def test_hostile_text_is_escaped_in_live_events(client: TestClient, refs: Refs) -> None:
    body = client.get(f"/t/{refs.hostile}/events", params={"after": 0}).text
    fragments = [
        json.loads(line.removeprefix("data: "))["html"]
        for line in body.splitlines()
        if line.startswith('data: {"seq"')
    ]
    assert len(fragments) == 4
    for html in fragments:
        assert_inert(html)
    assert "&lt;script&gt;" in fragments[0]


def test_the_whole_output_is_plain_text_never_html(client: TestClient, refs: Refs) -> None:
    r = client.get(f"/t/{refs.hostile}/output/3/h1")
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "<script>alert('pwned')</script>" in r.text  # the record, byte for byte


def _now() -> datetime:
    return datetime.now(UTC)


async def test_a_lone_surrogate_is_spelled_out_and_the_page_still_encodes() -> None:
    text = "before \ud800 after \udfff"
    msg = Message(
        role="user", content=[TextBlock(text=text)], seq=1, thread_id="x", created_at=_now()
    )
    info: Any = SimpleNamespace(id="x")  # message_views reads only the id
    html = await render("_message.html", m=message_views(info, [msg])[0])
    assert "before \\ud800 after \\udfff" in html
    html.encode("utf-8")  # a response never fails to encode


def test_shown_draws_controls_and_keeps_printable_text() -> None:
    assert shown("plain text\n\tindented") == "plain text\n\tindented"
    assert shown("a\x1b[1mb\x00c\x7fd\x9be") == "a^[[1mb^@c^?d\\x9be"
    assert shown("line\r\nnext\rover") == "line\r\nnext^Mover"


def test_an_export_escapes_like_the_page(db: tuple[str, Refs], tmp_path: Path) -> None:
    from orchestrator.web import write_thread_html

    path, refs = db

    async def go() -> str:
        out: list[str] = []
        async with await Store.open(path) as store:
            await write_thread_html(store, refs.hostile, out.append)
        return "".join(out)

    html = asyncio.run(go())
    for bad in LIVE_MARKUP:
        assert bad not in html
    assert "<script" not in html
