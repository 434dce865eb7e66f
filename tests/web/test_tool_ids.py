"""Links to a tool call's whole input and output, for tool-use ids of any spelling: an import
or an OpenAI-compatible server chooses them, so an id may hold ``/``, ``?``, ``#``, ``%``,
spaces, quotes and markup, or be a dot segment. The thread is imported from a JSONL file with
the real ``threadloom import``, served by the real ``threadloom serve``, and every link is
resolved against its page as a browser resolves it (``urljoin``) and followed."""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import quote, urljoin

import httpx

from ._data import TOOL_IDS, import_tool_ids
from ._serve import serving


def test_every_whole_link_leads_to_its_own_text_whatever_the_tool_use_id(
    tmp_path: Path,
) -> None:
    db, ref, wholes = import_tool_ids(tmp_path)
    with serving(db, "serve", "--port", "0") as (line, _):
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)/ ", line)
        assert found, line
        base = found.group(1)
        page_url = f"{base}/t/{ref}"
        page = httpx.get(page_url, timeout=30).text
        links = [html.unescape(h) for h in re.findall(r'<a class="whole" href="([^"]*)"', page)]
        assert len(links) == len(wholes) == 2 * len(TOOL_IDS)
        for link, whole in zip(links, wholes, strict=True):
            r = httpx.get(urljoin(page_url, link), timeout=30)
            assert r.status_code == 200, (link, r.text[:200])
            assert r.text == whole, link
        # the older form, the id in the path: one holding a "/" is reached too
        slashed = f"{base}/t/{ref}/output/3/{quote(TOOL_IDS[0], safe='')}"
        assert httpx.get(slashed, timeout=30).text == wholes[1]
