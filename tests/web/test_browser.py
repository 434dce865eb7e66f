"""A person's walk through the viewer in a real browser: Debian's chromium driven by playwright,
against the real server on a loopback port over a real database. Under CI a missing chromium or
playwright fails this test (it must run there); elsewhere it is skipped, saying what is missing.
"""

from __future__ import annotations

import asyncio
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from store import NewMessage, Status, Store

from ._browser import browser_missing, chromium, viewer
from ._data import import_tool_ids
from .conftest import _make

TIMEOUT_MS = 15_000


@pytest.fixture
def browser_ready() -> None:
    missing = browser_missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the browser test: {missing}")
        pytest.skip(missing)


def _append(db: str, ref: str, text: str, *, done: bool = False) -> None:
    """Append through the real Store, from a thread of its own: playwright's sync API runs an
    event loop in the test's thread, so the store gets another."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: asyncio.run(_append_now(db, ref, text, done=done))).result()


async def _append_now(db: str, ref: str, text: str, *, done: bool) -> None:
    async with await Store.open(db) as store:
        tid = (await store.resolve(ref)).thread.id
        await store.append(tid, NewMessage.assistant(text))
        if done:
            await store.set_status(tid, Status.DONE)


@pytest.mark.slow
@pytest.mark.usefixtures("browser_ready")
def test_a_reader_walks_the_list_a_job_a_thread_a_fork_search_and_a_live_thread(
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    db = str(tmp_path / "threads.db")
    refs = asyncio.run(_make(Path(db)))
    with viewer(db) as url, chromium() as browser:
        page = browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

        # the list, then the job of the worker row
        page.goto(f"{url}/")
        expect(page.locator("table.threads")).to_contain_text("Fix the tokenizer tests")
        page.locator(f"tr:has(a[href='/t/{refs.worker}'])").get_by_text("tree").click()
        expect(page).to_have_url(f"{url}/job/{refs.lead}")
        expect(page.locator("ul.tree")).to_contain_text("fork of #3")

        # into the worker's thread from the tree
        page.locator(f"ul.tree a[href='/t/{refs.worker}']").click()
        expect(page).to_have_url(f"{url}/t/{refs.worker}")
        expect(page.locator("section.result")).to_contain_text("dropped the closing quote")

        # a tool output: collapsed, expanded by a click, capped with a link to the whole
        output = page.locator(f"article[id='{refs.long_seq}'] details.tool")
        body = output.locator("pre.body").first
        expect(body).to_be_hidden()
        output.locator("summary").click()
        expect(body).to_be_visible()
        expect(body).to_contain_text("line 0: FAILED test_0")
        expect(output.locator("a.whole")).to_have_attribute(
            "href", f"/t/{refs.worker}/output/{refs.long_seq}?id=b1"
        )

        # follow the fork link; its inherited messages link back to their origin
        page.locator(f"dl.meta a[href='/t/{refs.fork}']").click()
        expect(page).to_have_url(f"{url}/t/{refs.fork}")
        expect(page.locator("article[id='4']")).to_contain_text("try another way")
        expect(page.locator("dl.meta")).to_contain_text(f"{refs.worker}#3")

        # search from the header, then as you type on the search page
        page.locator("header.top input[name=q]").fill("closing")
        page.locator("header.top input[name=q]").press("Enter")
        expect(page).to_have_url(re.compile(r"/search\?q=closing$"))
        page.locator("#q").fill("quoted strings")
        hit = page.locator(f"#hits a[href='/t/{refs.worker}#1']")
        expect(hit).to_be_visible()
        expect(page).to_have_url(re.compile(r"/search\?q=quoted\+strings$"))
        hit.click()
        expect(page).to_have_url(f"{url}/t/{refs.worker}#1")
        expect(page.locator("article.msg:target")).to_have_attribute("id", "1")

        # a running thread's page shows a message appended while it is open
        page.goto(f"{url}/t/{refs.running}")
        expect(page.locator("article.msg")).to_have_count(1)
        page.wait_for_function("() => document.querySelector('#messages').dataset.events")
        _append(db, refs.running, "a message appended while the page was open")
        expect(page.locator("article[id='2']")).to_contain_text("appended while the page")
        _append(db, refs.running, "and the last one", done=True)
        expect(page.locator("article[id='3']")).to_contain_text("and the last one")
        expect(page.locator(".thread-head [data-status]")).to_have_text("done")
        expect(page.locator("#live")).to_have_text("the thread has ended")
        assert errors == []


@pytest.mark.slow
@pytest.mark.usefixtures("browser_ready")
def test_an_exported_page_opens_from_a_file_and_fetches_nothing(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    from tests.orchestrator.test_cli_helpers import run_cli

    db = str(tmp_path / "threads.db")
    refs = asyncio.run(_make(Path(db)))
    done = run_cli("export", refs.worker, "--format", "html", db=db)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "thread.html"
    path.write_text(done.stdout, encoding="utf-8")
    with chromium() as browser:
        page = browser.new_page()
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(path.as_uri())
        expect(page.locator("article.msg")).to_have_count(6)
        # styled by the inlined stylesheet: a message is a bordered card
        border = page.locator("article.msg").first.evaluate(
            "e => getComputedStyle(e).borderTopStyle"
        )
        assert border == "solid"
        output = page.locator(f"article[id='{refs.long_seq}'] details.tool")
        output.locator("summary").click()
        expect(output.locator("pre.body")).to_contain_text("line 150: FAILED")
        assert requests == [path.as_uri()]


async def _long_thread(db: str, n: int) -> str:
    async with await Store.open(db) as store:
        msgs = [
            NewMessage.user(f"m{i}") if i % 2 else NewMessage.assistant(f"m{i}")
            for i in range(1, n + 1)
        ]
        return (await store.create_thread(kind="worker", title="long", messages=msgs)).ref


@pytest.mark.slow
@pytest.mark.usefixtures("browser_ready")
def test_a_bare_anchor_past_the_first_page_lands_on_its_message(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    from orchestrator.web._views import PAGE

    db = str(tmp_path / "threads.db")
    ref = asyncio.run(_long_thread(db, PAGE + 20))
    with viewer(db) as url, chromium() as browser:
        page = browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{url}/t/{ref}#{PAGE + 5}")
        expect(page).to_have_url(f"{url}/t/{ref}?from={PAGE + 1}#{PAGE + 5}")
        expect(page.locator("article.msg:target")).to_have_attribute("id", str(PAGE + 5))
        expect(page.locator(f"article[id='{PAGE + 5}']")).to_be_in_viewport()


@pytest.mark.slow
@pytest.mark.usefixtures("browser_ready")
def test_a_whole_output_opens_from_its_link_whatever_the_tool_use_id(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    db, ref, wholes = import_tool_ids(tmp_path)
    with viewer(db) as url, chromium() as browser:
        page = browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        for n, whole in enumerate(wholes):
            page.goto(f"{url}/t/{ref}")
            link = page.locator("a.whole").nth(n)
            link.locator("xpath=ancestor::details[1]/summary").click()
            link.click()
            what = "input" if n % 2 == 0 else "output"
            expect(page).to_have_url(re.compile(rf"^{url}/t/{ref}/{what}/{n + 2}\?id="))
            assert page.locator("body").inner_text().rstrip("\n") == whole.rstrip("\n")


@pytest.mark.slow
@pytest.mark.usefixtures("browser_ready")
@pytest.mark.parametrize("width", [1280, 400])
def test_no_page_runs_off_the_screen_and_no_ref_wraps(tmp_path: Path, width: int) -> None:
    db = str(tmp_path / "threads.db")
    refs = asyncio.run(_make(Path(db)))
    pages = ["/", f"/t/{refs.worker}", f"/t/{refs.fork}", f"/job/{refs.worker}", "/search?q=fix"]
    with viewer(db) as url, chromium() as browser:
        page = browser.new_page(viewport={"width": width, "height": 800})
        for path in pages:
            page.goto(url + path)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path} at {width}px runs {overflow}px off the screen"
            # a ref is one word on one line: one box per link, wherever it is
            wrapped = page.evaluate(
                "[...document.querySelectorAll('a.ref, code.ref')]"
                ".filter(e => e.getClientRects().length > 1).map(e => e.textContent)"
            )
            assert wrapped == [], f"{path} at {width}px wraps {wrapped}"
