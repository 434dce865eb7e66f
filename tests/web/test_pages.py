"""What the thread pages show beyond the transcript: where an imported thread came from, which
thread a call spawned, and an assistant's Markdown rendered safely."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from orchestrator.web import create_app
from store import NewMessage, NewWorker, SpawnRequest, Store, ToolResultBlock, ToolUseBlock
from tests.orchestrator.test_cli_helpers import run_cli
from tests.realsessions import CLAUDE

SESSION = CLAUDE / "-Users-User-repo-codemie-ai-codemie-code"
MAIN_ID = "e9fb405b-169f-40eb-9396-7e75076f045d"
TASK_CALL = "toolu_bdrk_019PUUtqzQg8U5ogfuyQ7yLV"  # the Task call that ran agent a485154


@pytest.fixture
def imported(tmp_path: Path) -> tuple[str, dict[str, dict[str, object]]]:
    """A real Claude Code 2.1.7 session and its subagent, imported with the real CLI."""
    if not SESSION.is_dir():
        pytest.fail(f"the real session files are missing: {SESSION}")
    db = str(tmp_path / "threads.db")
    done = run_cli("--json", "import", str(SESSION), db=db)
    assert done.returncode == 0, done.stderr
    threads = json.loads(done.stdout)["threads"]
    main = next(t for t in threads if t["source"]["session_id"] == MAIN_ID and not t["forked_from"])
    worker = next(t for t in threads if t["kind"] == "worker" and t["parent"] == main["ref"])
    return db, {"main": main, "worker": worker}


def test_an_imported_thread_says_so_in_the_list_and_where_it_came_from_on_its_page(
    imported: tuple[str, dict[str, dict[str, object]]],
) -> None:
    db, t = imported
    main = t["main"]
    with TestClient(create_app(db)) as c:
        listing = c.get("/").text
        page = c.get(f"/t/{main['ref']}").text
    row = next(r for r in listing.split("<tr>") if f">{main['ref']}</a>" in r)
    assert '<span class="badge imported"' in row and ">claude-code</span>" in row
    assert "imported · claude-code" in page
    source = re.search(r'<dd class="source">(.*?)</dd>', page, re.S)
    assert source is not None
    assert f"<code>{MAIN_ID}</code>" in source.group(1)
    assert f"{MAIN_ID}.jsonl</code>" in source.group(1)  # the file it was read from


def test_the_task_call_that_ran_a_subagent_links_to_its_thread(
    imported: tuple[str, dict[str, dict[str, object]]],
) -> None:
    db, t = imported
    main, worker = t["main"], t["worker"]
    data = json.loads(run_cli("--json", "show", str(worker["ref"]), db=db).stdout)
    assert data["source"]["tool_use_id"] == TASK_CALL  # the importer ties them
    with TestClient(create_app(db)) as c:
        page = c.get(f"/t/{main['ref']}").text
    call = re.search(
        r"Task\(subagent_type=.*?</details>\s*<ul class=\"spawned\">(.*?)</ul>", page, re.S
    )
    assert call is not None, "no spawned thread under the Task call"
    assert f'<a class="ref" href="/t/{worker["ref"]}">{worker["ref"]}</a>' in call.group(1)


async def test_a_dispatch_call_links_each_worker_it_spawned(tmp_path: Path) -> None:
    path = str(tmp_path / "threads.db")
    async with await Store.open(path) as store:
        lead = await store.create_thread(kind="lead", messages=[NewMessage.user("go")])
        call = ToolUseBlock(id="d1", name="dispatch", input={"tasks": [{"title": "a"}, {}]})
        await store.append(lead.id, NewMessage(role="assistant", content=[call]))
        workers = tuple(NewWorker(i, f"t{i}", title=f"task {i}") for i in (0, 1))
        spawned = await store.dispatches.spawn(SpawnRequest(lead.id, "d1", workers))
        done = ToolResultBlock(tool_use_id="d1", content="dispatched")
        await store.append(lead.id, NewMessage(role="user", content=[done]))
    with TestClient(create_app(path)) as c:
        page = c.get(f"/t/{lead.ref}").text
    block = re.search(r'<ul class="spawned">(.*?)</ul>', page, re.S)
    assert block is not None
    assert [f"T-{w.id}" for w, _ in spawned] == re.findall(r'href="/t/(T-\w+)"', block.group(1))


MARKDOWN = """## Plan
Fixed **the bug** in `parser.py`; see {ref}#1 and [the run]({ref}#2), not `{ref}#1`.

<b>raw</b> <script>alert(1)</script> [evil](javascript:alert(1)) [data](data:text/html,x)
![pixel](http://example.com/x.png) [docs](https://example.com/a) &amp;
"""


async def _markdown_thread(path: str) -> str:
    async with await Store.open(path) as store:
        info = await store.create_thread(kind="worker", messages=[NewMessage.user("**not bold**")])
        await store.append(info.id, NewMessage.assistant(MARKDOWN.format(ref=info.ref)))
        return info.ref


async def test_an_assistants_markdown_is_rendered_with_no_raw_html_and_safe_links(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "threads.db")
    ref = await _markdown_thread(path)
    with TestClient(create_app(path)) as c:
        page = c.get(f"/t/{ref}").text
    text = page[page.index('<article class="msg assistant" id="2">') :]
    text = text[: text.index("</article>")]
    assert "<h2>Plan</h2>" in text and "<strong>the bug</strong>" in text
    assert f'<a href="#1">{ref}#1</a>' in text  # a bare ref, to its message on this page
    assert '<a href="#2">the run</a>' in text  # a link to a ref
    assert f"<code>{ref}#1</code>" in text  # code stays code
    assert "&lt;b&gt;raw&lt;/b&gt; &lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "javascript:" not in text and "data:" not in text and "<img" not in text
    assert " evil data" in text  # a refused link keeps its text
    assert '<a href="https://example.com/a" rel="noopener noreferrer nofollow">docs</a>' in text
    assert "&amp;amp;" in text  # an entity stays the text that was written
    assert "<p>**not bold**" not in page and "**not bold**" in page  # a user's text stays as is


async def test_an_exported_pages_markdown_links_its_own_messages_by_anchor(tmp_path: Path) -> None:
    path = str(tmp_path / "threads.db")
    ref = await _markdown_thread(path)
    html = run_cli("export", ref, "--format", "html", db=path).stdout
    assert f'<a href="#1">{ref}#1</a>' in html and '<a href="#2">the run</a>' in html
    assert not [h for h in re.findall(r'href="([^"]*)"', html) if h.startswith("/")]


@pytest.mark.parametrize(
    "text",
    [
        "Step 12: running case 12 to narrow the failure down.",
        'a "quoted" word, it\'s (fine) — 50% {x} @me\nsecond line\n\n\nnext paragraph\n',
        "\n\nx\n\ny\n",
        "",
        # not plain: each goes to the parser
        "1. a list",
        "- item",
        "line  \nhard break",
        "text\n===",
        "    code",
        "a *b* c",
        "see T-01m94hqzmn1hg1k7abfbak27tm#3",
        "x\r\ny",
        "<b>x</b> &amp;",
    ],
)
def test_plain_text_skips_the_parser_and_renders_as_it_would(text: str) -> None:
    from orchestrator.web._markdown import _parser, _plain, markdown
    from orchestrator.web._views import SERVER

    parsed = _parser().render(text, {"links": SERVER, "open": []})
    plain = _plain(text)
    assert plain is None or plain == parsed
    assert str(markdown(text, SERVER)) == parsed.replace("'", "&#39;")
