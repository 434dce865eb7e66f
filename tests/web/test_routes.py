"""The viewer's routes through the ASGI test client, on a real SQLite database built through
the real Store (``_data``)."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.testclient import TestClient

from orchestrator.web import create_app
from orchestrator.web._views import PAGE

from ._data import HUGE_CHARS, LONG_LINES, Refs


def ids_of(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<article class="msg \w+" id="(\d+)"', html)]


def test_the_list_links_every_thread_and_filters_by_job_status_and_kind(
    client: TestClient, refs: Refs
) -> None:
    page = client.get("/").text
    for ref in (refs.lead, refs.worker, refs.other, refs.fork, refs.hostile, refs.running):
        assert f'href="/t/{ref}"' in page
    failed = client.get("/", params={"status": "failed"}).text
    assert refs.other in failed and refs.worker not in failed
    leads = client.get("/", params={"kind": "lead"}).text
    assert refs.lead in leads and refs.worker not in leads
    job = client.get("/", params={"job": refs.fork}).text  # any thread of the job names it
    assert refs.worker in job and refs.hostile not in job and refs.running not in job


def test_a_bad_filter_is_a_400_naming_it(client: TestClient) -> None:
    r = client.get("/", params={"status": "sleeping"})
    assert r.status_code == 400 and "status: one of" in r.text


def test_a_thread_page_anchors_every_message_by_seq_with_lineage_and_result(
    client: TestClient, refs: Refs
) -> None:
    r = client.get(f"/t/{refs.worker}")
    assert r.status_code == 200
    html = r.text
    assert ids_of(html) == [1, 2, 3, 4, 5, 6]
    assert f'href="/job/{refs.lead}"' in html  # the job
    assert f'href="/t/{refs.lead}"' in html  # the parent
    assert f'href="/t/{refs.fork}"' in html  # its fork
    assert "The tokenizer dropped the closing quote." in html  # the result at the top
    assert html.index("The tokenizer dropped") < html.index('id="1"')
    assert 'href="#3"' in html  # evidence links to the message, here on this page
    assert "The quote handling looks off by one." in html  # thinking shown


def test_a_fork_links_its_origin_and_marks_inherited_messages(
    client: TestClient, refs: Refs
) -> None:
    html = client.get(f"/t/{refs.fork}").text
    assert f'href="/t/{refs.worker}#3"' in html  # fork of T-worker#3
    assert ids_of(html) == [1, 2, 3, 4]
    assert html.count(f'from <a class="ref" href="/t/{refs.worker}#') == 3


def test_tool_calls_and_outputs_are_collapsed_and_capped_with_a_link_to_the_whole(
    client: TestClient, refs: Refs
) -> None:
    html = client.get(f"/t/{refs.worker}").text
    assert "<details open" not in html.replace('<details class="thinking" open', "")
    link = f"/t/{refs.worker}/output/{refs.long_seq}?id=b1"
    assert f'href="{link}"' in html
    assert "line 0: FAILED" in html and f"line {LONG_LINES - 1}: FAILED" in html
    assert "line 150: FAILED" not in html  # the middle is left out of the page
    whole = client.get(link)
    assert whole.headers["content-type"].startswith("text/plain")
    assert whole.text.count("\n") == LONG_LINES - 1 and "line 150: FAILED" in whole.text
    # an output stored apart: the page has a preview, the link streams all of it
    huge = f"/t/{refs.worker}/output/{refs.huge_seq}?id=r1"
    assert f'href="{huge}"' in html and len(html) < 100_000
    assert client.get(huge).text == "x" * HUGE_CHARS
    # the links of earlier pages, with the id in the path, still lead there
    assert client.get(f"/t/{refs.worker}/output/{refs.long_seq}/b1").text == whole.text
    assert client.get(f"/t/{refs.worker}/output/{refs.huge_seq}/r1").text == "x" * HUGE_CHARS


def test_a_whole_input_is_served_and_an_unknown_tool_id_is_a_404(
    client: TestClient, refs: Refs
) -> None:
    r = client.get(f"/t/{refs.worker}/input/2", params={"id": "b1"})
    assert r.status_code == 200 and '"command": "pytest -q tests/"' in r.text
    assert client.get(f"/t/{refs.worker}/input/2/b1").text == r.text
    assert client.get(f"/t/{refs.worker}/output/2", params={"id": "nope"}).status_code == 404
    assert client.get(f"/t/{refs.worker}/output/2/nope").status_code == 404
    assert client.get(f"/t/{refs.worker}/nonsense/2", params={"id": "b1"}).status_code == 404
    assert client.get(f"/t/{refs.worker}/nonsense/2/b1").status_code == 404
    missing = client.get(f"/t/{refs.worker}/input/2")
    assert missing.status_code == 400 and "id: " in missing.text


def test_the_job_tree_nests_children_and_forks_and_marks_the_focus(
    client: TestClient, refs: Refs
) -> None:
    html = client.get(f"/job/{refs.fork}").text
    order = [html.index(f'href="/t/{r}"') for r in (refs.lead, refs.worker, refs.fork)]
    assert order == sorted(order)
    assert "fork of #3" in html
    assert re.search(
        rf'<li class="node focus">\s*<span class="fork">[^<]*</span>\s*'
        rf'<a class="ref" href="/t/{refs.fork}"',
        html,
    )
    assert refs.hostile not in html


def test_search_hits_link_to_their_message(client: TestClient, refs: Refs) -> None:
    html = client.get("/search", params={"q": "quoted strings"}).text
    assert f'href="/t/{refs.worker}#1"' in html
    assert "<mark>" in html
    fragment = client.get("/search", params={"q": "quoted", "fragment": "1"}).text
    assert "<html" not in fragment and f'href="/t/{refs.worker}#1"' in fragment
    assert "no matches" in client.get("/search", params={"q": "zebrafish"}).text
    assert client.get("/search").status_code == 200


def test_unknown_and_malformed_refs_are_404_and_400(client: TestClient) -> None:
    assert client.get("/t/T-zzzzzzzz").status_code == 404
    assert client.get("/job/T-zzzzzzzz").status_code == 404
    assert client.get("/t/nonsense").status_code == 400


def test_the_server_is_read_only_and_sends_a_strict_content_security_policy(
    client: TestClient, refs: Refs
) -> None:
    r = client.get(f"/t/{refs.worker}")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    for method in ("post", "put", "delete"):
        assert getattr(client, method)(f"/t/{refs.worker}").status_code == 405


def test_a_loopback_server_refuses_a_foreign_host_header(db: tuple[str, Refs]) -> None:
    from orchestrator.exposure import bind, expose
    from orchestrator.web import create_app

    with bind("127.0.0.1", 0, door="serve") as sock:
        exposure = expose(sock, "127.0.0.1")
    with TestClient(create_app(db[0], exposure=exposure)) as c:
        assert c.get("/", headers={"host": "127.0.0.1:8765"}).status_code == 200
        assert c.get("/", headers={"host": "localhost"}).status_code == 200
        refused = c.get("/", headers={"host": "evil.example:8765"})
        assert refused.status_code == 400
        assert "content-security-policy" in refused.headers  # the refusal is a response too


def test_static_files_are_served_from_the_package(client: TestClient) -> None:
    assert "article.msg" in client.get("/static/style.css").text
    assert "EventSource" in client.get("/static/live.js").text


def test_the_events_of_a_finished_thread_send_what_is_missing_then_end(
    client: TestClient, refs: Refs
) -> None:
    body = client.get(f"/t/{refs.worker}/events", params={"after": 4}).text
    assert re.findall(r"^id: (\d+)$", body, re.M) == ["5", "6"]
    assert 'event: status\ndata: {"status": "done"}' in body
    assert body.rstrip().endswith("event: end\ndata: {}")
    # a reconnecting EventSource sends Last-Event-ID: nothing it has is sent again
    again = client.get(
        f"/t/{refs.worker}/events", params={"after": 4}, headers={"last-event-id": "5"}
    ).text
    assert re.findall(r"^id: (\d+)$", again, re.M) == ["6"]


def test_a_running_threads_page_subscribes_to_its_events(client: TestClient, refs: Refs) -> None:
    html = client.get(f"/t/{refs.running}").text
    assert f'data-events="/t/{refs.running}/events?after=1"' in html
    assert "data-events" not in client.get(f"/t/{refs.worker}").text


async def test_a_long_thread_pages_by_seq_range(tmp_path: Path) -> None:
    from store import NewMessage, Store

    path = tmp_path / "long.db"
    async with await Store.open(str(path)) as store:
        info = await store.create_thread(
            kind="worker",
            title="long",
            messages=[
                NewMessage.user(f"m{i}") if i % 2 else NewMessage.assistant(f"m{i}")
                for i in range(1, 2 * PAGE + 51)
            ],
        )
    from orchestrator.web import create_app

    with TestClient(create_app(str(path))) as c:
        first = c.get(f"/t/{info.ref}").text
        assert ids_of(first) == list(range(1, PAGE + 1))
        assert f'href="/t/{info.ref}?from={PAGE + 1}"' in first
        last = c.get(f"/t/{info.ref}", params={"from": 2 * PAGE + 1}).text
        assert ids_of(last) == list(range(2 * PAGE + 1, 2 * PAGE + 51))
        assert f'href="/t/{info.ref}?from={PAGE + 1}"' in last
        hits = c.get("/search", params={"q": f"m{PAGE + 7}"}).text
        assert f'href="/t/{info.ref}?from={PAGE + 1}#{PAGE + 7}"' in hits


def test_a_negative_after_is_a_400_before_any_event_is_sent(client: TestClient, refs: Refs) -> None:
    # it used to start the stream, then fail reading message #-5: a dropped connection that
    # an EventSource retries every second
    for thread in (refs.worker, refs.running):
        r = client.get(f"/t/{thread}/events", params={"after": -5})
        assert r.status_code == 400 and "after: at least 0, not -5" in r.text
        assert r.headers["content-type"].startswith("text/html")


AFTERS = ["", "0", "-0", "+2", " 3 ", "6", "99999999999999999999", "abc", "1e3", "-1"]
LAST_IDS = [None, "5", "-1", "abc", "\u00b2", "99999999999999999999"]


def test_no_parameter_of_the_events_stream_fails_once_it_has_started(
    db: tuple[str, Refs], refs: Refs
) -> None:
    # the client raises any error of the app, one after the response started included. Each
    # stream after the first waits for the running poller's next round: at its 0.25 s, the 60
    # streams here took 10 s waiting on that clock, so this app polls every 10 ms
    with TestClient(create_app(db[0], poll_s=0.01)) as client:
        for after in AFTERS:
            for last_id in LAST_IDS:
                headers = {"last-event-id": last_id.encode("latin-1")} if last_id else {}
                params = {"after": after}
                r = client.get(f"/t/{refs.worker}/events", params=params, headers=headers)
                if r.status_code == 400:
                    assert r.text.count("after: ") == 1
                    continue
                assert r.status_code == 200, (after, last_id)
                assert r.text.startswith("retry: 1000\n\n"), (after, last_id)
                assert r.text.rstrip().endswith("event: end\ndata: {}")


def test_a_query_the_store_cannot_search_is_never_a_500(client: TestClient) -> None:
    # a NUL reached FTS5 as an unterminated string: a DatabaseError, and a 500. Whether the
    # store searches it (a NUL as a word separator) or refuses it, the page is no 500; nor
    # for a query of more words than the store may take
    many = " ".join(f"word{i}" for i in range(200))
    for q in ("\x00", "a\x00b", "quoted\x00strings", many):
        for params in ({"q": q}, {"q": q, "fragment": "1"}):
            r = client.get("/search", params=params)
            assert r.status_code in (200, 400), r.text
            if r.status_code == 400:
                assert "q: cannot search for" in r.text and "<h1>400</h1>" in r.text
    # a job that is no thread is still the ref's own error, not the query's
    assert client.get("/search", params={"q": "x", "job": "T-zzzzzzzz"}).status_code == 404
    assert client.get("/search", params={"q": "x", "job": "nonsense"}).status_code == 400


async def test_search_marks_matches_from_their_offsets_not_from_the_texts_brackets(
    tmp_path: Path,
) -> None:
    from store import NewMessage, Store

    path = tmp_path / "brackets.db"
    async with await Store.open(str(path)) as store:
        await store.create_thread(
            kind="worker", messages=[NewMessage.user("emit _BINARY[op] then [x] and [op]")]
        )
    from orchestrator.web import create_app

    with TestClient(create_app(str(path))) as c:
        html = c.get("/search", params={"q": "op"}).text
    snippet = re.search(r'<span class="snippet">(.*?)</span>', html)
    assert snippet is not None
    assert snippet.group(1) == "emit _BINARY[<mark>op</mark>] then [x] and [<mark>op</mark>]"
