"""The hostile-pages corpus (issue 22, items 8 and 9): every hostile payload in every place a
transcript can hold text, read through every door that draws a page — the thread page, the
thread list, search, the job tree, the live events and the HTML export — plus huge messages
and more live streams than the bounds allow. Each (payload, door) read is an attempt (the payload in
every place at once), as is each huge page and each stream opened; an escape is live markup, a
leak a raw invisible or control character, an unbounded page or a stream accepted beyond its
bound. The counts are printed as one JSON line (``pytest -s``) and must show no
leak."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx
from starlette.testclient import TestClient

from orchestrator.drawing import DRAWN
from orchestrator.web import create_app
from orchestrator.web._live import MAX_PER_THREAD, MAX_STREAMS
from store import (
    INLINE_LIMIT,
    NewMessage,
    Status,
    Store,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.orchestrator.test_cli_helpers import clean_env

from .test_live_bounds import _build as _running, _server

TAGS = "".join(chr(0xE0000 + ord(c)) for c in "run rm -rf ~")
PAYLOADS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "' onmouseover='alert(2)",
    "</pre></details></div><b>bold</b>",
    "<svg/onload=alert(3)>",
    "<a href=javascript:alert(4)>x</a>",
    "<!--",
    "<style>*{display:none}</style>",
    "<meta http-equiv=refresh content=0;url=//evil>",
    "<iframe srcdoc='<script>alert(5)</script>'>",
    "\x1b[2J\x1b]0;title\x07\x1b]52;c;cm0=\x07\x1b[8mhidden",
    "\x9b31m c1",
    "nul\x00 bell\x07 del\x7f cr\rover",
    "bidi \u202eevil\u202c \u2066iso\u2069 \u061calm \u200elrm \u200frlm",
    "zero\u200bwidth \u2060joiner \ufeffbom \u2062times \u180emvs",
    "tag " + "\U000e0001" + TAGS + "\U000e007f",
]
PLACES = ["title", "text", "thinking", "tool input", "tool output", "tool output stored apart"]
MARKUP = (  # each payload's markup as it would be live (the page's own tags are not these)
    "<script>alert",
    "<img src=x",
    "<svg/onload",
    "<a href=javascript",
    "<style>*{",
    "<meta http-equiv=refresh",
    "<iframe srcdoc",
    "<b>bold</b>",
    "<!--",
    "onmouseover='alert",
)


def _thread_text(payload: str) -> dict[str, str]:
    return {place: f"[{place}] {payload}" for place in PLACES}


async def _build(path: Path) -> list[tuple[str, str]]:
    """One thread per payload, the payload in every place; (ref, payload)."""
    out = []
    async with await Store.open(str(path)) as store:
        for i, payload in enumerate(PAYLOADS):
            text = _thread_text(payload)
            t = await store.create_thread(
                kind="worker",
                title=text["title"],
                status=Status.DONE,
                messages=[NewMessage.user("go")],
            )
            prose = [
                ThinkingBlock(thinking=text["thinking"], signature="s"),
                TextBlock(text=text["text"]),
            ]
            await store.append(t.id, NewMessage(role="assistant", content=prose))
            calls = [
                ToolUseBlock(id=f"c{i}a", name="bash", input={"command": text["tool input"]}),
                ToolUseBlock(id=f"c{i}b", name="bash", input={"command": "cat big"}),
            ]
            await store.append(t.id, NewMessage(role="assistant", content=calls))
            big = "x" * (INLINE_LIMIT - 10) + text["tool output stored apart"] + "\n" * 10
            results = [
                ToolResultBlock(tool_use_id=f"c{i}a", content=text["tool output"]),
                ToolResultBlock(tool_use_id=f"c{i}b", content=big),
            ]
            await store.append(t.id, NewMessage(role="user", content=results))
            out.append((t.ref, payload))
    return out


def _leaks(body: str) -> list[str]:
    """What in an HTML body is live markup or a raw character that should have been drawn."""
    found = [m for m in MARKUP if m in body]
    found += [f"raw {hex(ord(m.group()))}" for m in DRAWN.finditer(body)]
    return found


def test_the_hostile_pages_corpus(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    threads = asyncio.run(_build(db))
    counts = {"attempts": 0, "escapes": 0, "leaks": 0}
    failures: list[str] = []

    def check(where: str, body: str) -> None:
        """One attempt: a door's body for one payload (in every place it shows)."""
        counts["attempts"] += 1
        bad = _leaks(body.replace('<script src="/static/live.js" defer></script>', ""))
        live = [b for b in bad if not b.startswith("raw ")]
        counts["escapes"] += bool(live)  # markup that would run or render
        counts["leaks"] += len(bad) > len(live)  # characters sent raw, not drawn
        if bad:
            failures.append(f"{where}: {bad[:4]}")

    # the live events poll every 10 ms, not 0.25 s: each stream after the first waits for the
    # poller's next round, and 16 of them waited 4 s on that clock
    with TestClient(create_app(str(db), poll_s=0.01)) as client:
        for ref, payload in threads:
            check(f"page {payload[:20]!r}", client.get(f"/t/{ref}").text)
            events = client.get(f"/t/{ref}/events", params={"after": 0}).text
            for line in events.splitlines():
                if line.startswith('data: {"seq"'):
                    check(f"event {payload[:20]!r}", json.loads(line[6:])["html"])
            check(f"tree {payload[:20]!r}", client.get(f"/job/{ref}").text)
        check("index", client.get("/").text)
        for word in ("alert", "bidi", "zero", "tag", "title"):
            check(f"search {word}", client.get("/search", params={"q": word}).text)

    cmd = [sys.executable, "-m", "orchestrator", "--db", str(db), "export", "--format", "html"]
    for ref, payload in threads:
        run = subprocess.run([*cmd, ref], capture_output=True, env=clean_env(), check=True)
        check(f"export {payload[:20]!r}", run.stdout.decode("utf-8"))

    # huge messages: a 12 MB text, thinking and tool input make a page of tens of kilobytes
    huge = "y" * 12_000_000
    ref = asyncio.run(_huge(db, huge))
    with TestClient(create_app(str(db))) as client:
        size = len(client.get(f"/t/{ref}").content)
        counts["attempts"] += 1
        if size > 200_000:
            counts["leaks"] += 1
            failures.append(f"a page of {size} bytes")

    # more live streams than the bounds allow
    refs = asyncio.run(_running(db, MAX_STREAMS // MAX_PER_THREAD + 1))
    accepted: dict[str, int] = {}
    with (
        _server(db) as (base, _),
        httpx.Client(timeout=httpx.Timeout(30, read=30)) as http,
        ExitStack() as stack,
    ):
        for ref in refs:
            for _ in range(MAX_PER_THREAD + 1):
                counts["attempts"] += 1
                r = stack.enter_context(http.stream("GET", f"{base}/t/{ref}/events?after=1"))
                if r.status_code == 200:
                    accepted[ref] = accepted.get(ref, 0) + 1
                else:
                    assert r.status_code in (429, 503)
                    r.read()
                    r.close()
    beyond = max(sum(accepted.values()) - MAX_STREAMS, 0)
    beyond += sum(max(n - MAX_PER_THREAD, 0) for n in accepted.values())
    counts["leaks"] += beyond
    if beyond:
        failures.append(f"{beyond} streams accepted beyond the bounds")
    assert sum(accepted.values()) == MAX_STREAMS  # the bound, reached and held

    print(json.dumps({"corpus": "hostile pages", **counts}))
    assert not failures, failures


async def _huge(path: Path, text: str) -> str:
    async with await Store.open(str(path)) as store:
        t = await store.create_thread(
            kind="worker", title="huge", status=Status.DONE, messages=[NewMessage.user(text)]
        )
        blocks = [
            ThinkingBlock(thinking=text, signature="s"),
            TextBlock(text=text),
            ToolUseBlock(id="h", name="bash", input={"command": text}),
        ]
        await store.append(t.id, NewMessage(role="assistant", content=blocks))
        return t.ref
