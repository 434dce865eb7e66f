"""A job larger than one context in the web viewer (SPEC "Jobs larger than one context"): a
thread page links the thread it continues and the one that continued it; the job page shows
the leads in chain order, each with its workers, and a worker's successor after it — on a chain
stored by ``Store.hand_off`` in a real SQLite file, read through the app's test client."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.testclient import TestClient

from orchestrator.web import create_app
from store import Store
from tests._handoffs import Chain, build_chain


async def _chain(tmp_path: Path) -> tuple[str, Chain]:
    path = str(tmp_path / "threads.db")
    async with await Store.open(path) as store:
        return path, await build_chain(store)


def _meta(page: str, term: str) -> str | None:
    """The ``<dd>`` of the thread header's ``<dt>term</dt>``, or None."""
    found = re.search(rf"<dt>{term}</dt><dd[^>]*>(.*?)</dd>", page, re.S)
    return found.group(1) if found else None


async def test_a_thread_page_links_its_place_in_the_chain(tmp_path: Path) -> None:
    path, c = await _chain(tmp_path)
    with TestClient(create_app(path)) as client:
        pages = {n: client.get(f"/t/{c.ref(n)}").text for n in ("lead1", "lead2", "lead3", "w1")}
        w2b = client.get(f"/t/{c.ref('w2b')}").text
    links = {
        name: (_meta(page, "continues"), _meta(page, "continued by"))
        for name, page in pages.items()
    }
    assert links["lead1"][0] is None and links["w1"] == (None, None)
    assert links["lead3"][1] is None

    def href(dd: str | None) -> str:
        assert dd is not None
        found = re.search(r'<a class="ref" href="(/t/T-\w+)">(T-\w+)</a>', dd)
        assert found is not None, dd
        return found.group(1)

    assert href(links["lead1"][1]) == f"/t/{c.ref('lead2')}"
    assert href(links["lead2"][0]) == f"/t/{c.ref('lead1')}"
    assert href(links["lead2"][1]) == f"/t/{c.ref('lead3')}"
    assert href(links["lead3"][0]) == f"/t/{c.ref('lead2')}"
    assert href(_meta(w2b, "continues")) == f"/t/{c.ref('w2')}"


async def test_the_job_page_shows_the_chain_of_leads_and_a_workers_successor(
    tmp_path: Path,
) -> None:
    path, c = await _chain(tmp_path)
    with TestClient(create_app(path)) as client:
        # any thread of the job gives its whole tree, the leads in chain order
        page = client.get(f"/job/{c.ref('w3')}").text
        assert client.get(f"/job/{c.ref('lead3')}").text.count('class="node') == 7
    found = list(re.finditer(r'<li class="node([^"]*)">\s*(.*?)(?=<ul>|</li>)', page, re.S))
    nodes = [m.groups() for m in found]
    firsts = [re.search(r'href="/t/(T-\w+)"', body) for _, body in nodes]
    order = [m.group(1) if m else None for m in firsts]
    assert order == [c.ref(n) for n in ("lead1", "w1", "w2", "w2b", "lead2", "w3", "lead3")]
    classes = dict(zip(order, (cls for cls, _ in nodes), strict=True))
    assert {r for r, cls in classes.items() if "successor" in cls} == {
        c.ref("w2b"),
        c.ref("lead2"),
        c.ref("lead3"),
    }
    assert "focus" in classes[c.ref("w3")]
    bodies = dict(zip(order, (body for _, body in nodes), strict=True))
    for before, after in (("lead1", "lead2"), ("w2", "w2b"), ("lead2", "lead3")):
        said = f'↳ continued by <a class="ref" href="/t/{c.ref(after)}">{c.ref(after)}</a>'
        assert said in bodies[c.ref(before)], before
    # the later leads are top-level nodes (in the tree's own list), not threads of the first
    lists = [page[: m.start()].count("<ul") - page[: m.start()].count("</ul") for m in found]
    assert [ref for ref, depth in zip(order, lists, strict=True) if depth == 1] == c.leads
