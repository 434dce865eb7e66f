"""The full-text index over message text: SQLite FTS5 or PostgreSQL tsvector + GIN.

Rows are written in the same transaction as the message they index. Each message's searchable
text is its text, thinking, tool names and inputs, and tool outputs; of a very large message only
the first ``HEAD_CHARS`` and last ``TAIL_CHARS`` characters are indexed (PostgreSQL refuses a
tsvector over 1 MB; the transcript itself always keeps everything).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from ._sqlite import MAX_ROWS, Tx
from .errors import SearchQueryError
from .models import (
    ContentBlock,
    SearchHit,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

HEAD_CHARS = 150_000
TAIL_CHARS = 50_000


SNIPPET_WORDS = 16


def hit_markers() -> tuple[str, str]:
    """The (open, close) strings a search's snippets mark their matches with, new for every
    search: a random token between private-use characters, which no transcript can spell by
    chance or by design (it cannot know the token), so ``unmark`` never takes text for a
    mark. Neither holds whitespace, so collapsing a snippet's whitespace keeps them whole."""
    token = secrets.token_hex(8)
    return f"\ue000{token}\ue001", f"\ue002{token}\ue003"


def unmark(snippet: str, markers: tuple[str, str]) -> tuple[str, list[tuple[int, int]]]:
    """A marked snippet as (its text on one line, whitespace collapsed; the ``[start, end)``
    character offsets of each match in that text): the text is the transcript's, every
    bracket of it as written, and the matches are known by where they are, never by what
    surrounds them."""
    open_, close = markers
    flat = " ".join(snippet.split())
    parts: list[str] = []
    marks: list[tuple[int, int]] = []
    pos = size = 0
    while (start := flat.find(open_, pos)) >= 0:
        end = flat.find(close, start + len(open_))
        if end < 0:
            break
        parts.append(flat[pos:start])
        size += start - pos
        hit = flat[start + len(open_) : end]
        if hit:
            marks.append((size, size + len(hit)))
        parts.append(hit)
        size += len(hit)
        pos = end + len(close)
    parts.append(flat[pos:])
    return "".join(parts), marks


_TERM = re.compile(r'"([^"]*)"|(\S+)')


MAX_TERMS = 64
"""Different words and phrases one search takes. Each is ranked against every hit of the
others: a pasted page of text (hundreds of terms) made one search run for minutes."""


def terms(query: str) -> list[str]:
    """The user's words and "quoted phrases", in order, each once (a repeated one adds nothing
    to a search that wants every one of them, and costs a pass over the hits). A NUL separates
    words (no index holds one). ``SearchQueryError`` past ``MAX_TERMS``."""
    out: list[str] = []
    seen: set[str] = set()
    for m in _TERM.finditer(query.replace("\x00", " ")):
        term = m.group(1) if m.group(1) is not None else m.group(2)
        if term and term.strip() and term.casefold() not in seen:
            seen.add(term.casefold())
            out.append(term)
    if len(out) > MAX_TERMS:
        raise SearchQueryError(
            f"a search of {len(out)} different words or phrases: at most {MAX_TERMS} (each one"
            " must occur in a hit; search for the few that tell it apart)"
        )
    return out


def fts5_query(query: str) -> str:
    """User text → an FTS5 query: every word (or "quoted phrase") must occur, punctuation is
    literal (``foo.py:12`` searches the phrase foo py 12 rather than a column filter)."""
    return " ".join('"' + t.replace('"', "") + '"' for t in terms(query))


def fts5_search_sql(*, by_job: bool) -> str:
    """The SQLite search statement, named parameters ``:q`` (``fts5_query``), ``:job`` (with
    ``by_job``) and ``:n``: hits best first, ties newest thread first, then by seq.

    Every hit must be ranked, but nothing else need be done for every hit: a common word hits
    most messages, and reading ``thread_id`` and ``seq`` of every hit (a lookup in the index's
    content table each) cost more than ranking them (a word in 41,000 of 110,000 messages:
    ~55 ms against ~40 ms here), before the joins and snippets. So the
    hits are ranked once (``hits``: rowid and rank), the ``:n``-th best rank is the cut, and
    only the hits at or above the cut — the page and its ties — are looked up (``page``),
    ordered by the full key and cut to ``:n``; only then are the page's snippets made (making
    them for every tie of a common word, before the cut, took 400-700 ms of a search that now
    takes 25). The result is the single statement's (rank, snippet and joins for every hit,
    then ``LIMIT``), hit for hit; a test holds the two equal. Within a job, the job's threads
    are chosen before ranking. ``:n`` below 1: every hit (``LIMIT -1``), or none for 0."""
    job = " AND f.thread_id IN (SELECT id FROM threads WHERE job_id = :job)" if by_job else ""
    return (
        "WITH hits AS MATERIALIZED ("
        " SELECT f.rowid AS rid, f.rank AS r FROM messages_fts f"
        f" WHERE messages_fts MATCH :q{job}),"
        " cut AS (SELECT r FROM hits ORDER BY r LIMIT 1 OFFSET max(:n, 1) - 1),"
        " page AS (SELECT hits.rid, hits.r, f.thread_id, f.seq FROM hits"
        "  JOIN messages_fts f ON f.rowid = hits.rid"
        "  WHERE :n < 1 OR NOT EXISTS (SELECT 1 FROM cut) OR hits.r <= (SELECT r FROM cut)"
        "  ORDER BY hits.r, f.thread_id DESC, f.seq LIMIT :n)"
        " SELECT page.thread_id, page.seq, m.role,"
        f" snippet(messages_fts, 0, :open, :close, '…', {SNIPPET_WORDS}) AS snip"
        " FROM page CROSS JOIN messages_fts f"
        " JOIN messages m ON m.thread_id = f.thread_id AND m.seq = f.seq"
        " WHERE messages_fts MATCH :q AND f.rowid = page.rid"
        " ORDER BY page.r, page.thread_id DESC, page.seq"
    )


TOP_SLACK = 500
"""Hits the first search statement ranks past the page (``fts5_top_sql``): enough for the ties
of the page's last rank in any transcript but a pathological one, which then falls back to
``fts5_search_sql``."""


def fts5_top_sql(*, by_job: bool) -> str:
    """``fts5_search_sql``'s hits without keeping every ranked hit: the ``:k`` best are kept
    by SQLite's top-k sorter as they are ranked (``top``; ranking a common word's 41,000 hits
    and keeping them all cost a quarter more than ranking them: ~42 against ~33 ms here), then
    cut, ordered and given snippets as there. A fifth column, ``sure``, says whether the page
    is exactly the full statement's: it is when ``top`` holds every hit, or when its last rank
    is worse than the page's last (then every hit tied with the page's last is in ``top``).
    When it is not, ``fts5_rows`` runs ``fts5_search_sql``. Parameters: those of
    ``fts5_search_sql`` and ``:k`` (> ``:n`` ≥ 1)."""
    job = " AND f.thread_id IN (SELECT id FROM threads WHERE job_id = :job)" if by_job else ""
    return (
        "WITH top AS MATERIALIZED ("
        " SELECT f.rowid AS rid, bm25(messages_fts) AS r FROM messages_fts f"
        f" WHERE messages_fts MATCH :q{job} ORDER BY r LIMIT :k),"
        " cut AS (SELECT r FROM top ORDER BY r LIMIT 1 OFFSET :n - 1),"
        " page AS (SELECT top.rid, top.r, f.thread_id, f.seq FROM top"
        "  JOIN messages_fts f ON f.rowid = top.rid"
        "  WHERE NOT EXISTS (SELECT 1 FROM cut) OR top.r <= (SELECT r FROM cut)"
        "  ORDER BY top.r, f.thread_id DESC, f.seq LIMIT :n)"
        " SELECT page.thread_id, page.seq, m.role,"
        f" snippet(messages_fts, 0, :open, :close, '…', {SNIPPET_WORDS}) AS snip,"
        " (SELECT count(*) FROM top) < :k OR (SELECT max(r) FROM top) > (SELECT r FROM cut)"
        " AS sure"
        " FROM page CROSS JOIN messages_fts f"
        " JOIN messages m ON m.thread_id = f.thread_id AND m.seq = f.seq"
        " WHERE messages_fts MATCH :q AND f.rowid = page.rid"
        " ORDER BY page.r, page.thread_id DESC, page.seq"
    )


Execute = Callable[[str, dict[str, Any]], Sequence[Sequence[Any]]]
"""Runs one statement with named parameters and returns its rows (a ``sqlite3`` connection's
``execute(…).fetchall()``, or SQLAlchemy's ``exec_driver_sql(…).all()``)."""


def fts5_rows(
    execute: Execute, query: str, *, job_id: str | None, limit: int
) -> list[tuple[str, int, str, str, list[tuple[int, int]]]]:
    """The ``(thread_id, seq, role, snippet, marks)`` rows of a search on SQLite, best first
    (``unmark``: the snippet's text, and where its matches are in it): the top-k statement
    (``fts5_top_sql``), or the full one when that cannot be sure of the page (or no limit is
    set: ``limit`` < 1 returns nothing for 0, every hit below)."""
    q = fts5_query(query)
    if not q:
        return []
    limit = min(limit, MAX_ROWS)
    markers = hit_markers()
    params: dict[str, Any] = {
        "q": q,
        "job": job_id,
        "n": limit,
        "open": markers[0],
        "close": markers[1],
    }
    rows: Sequence[Sequence[Any]] = []
    if limit > 0:
        rows = execute(fts5_top_sql(by_job=bool(job_id)), {**params, "k": limit + TOP_SLACK})
    if limit <= 0 or (rows and not rows[0][4]):
        rows = execute(fts5_search_sql(by_job=bool(job_id)), params)
    return [(r[0], int(r[1]), r[2], *unmark(str(r[3]), markers)) for r in rows]


def searchable_text(content: Sequence[ContentBlock]) -> str:
    parts: list[str] = []
    for b in content:
        if isinstance(b, TextBlock):
            parts.append(b.text)
        elif isinstance(b, ThinkingBlock):
            parts.append(b.thinking)
        elif isinstance(b, ToolUseBlock):
            parts.append(f"{b.name} {json.dumps(b.input, ensure_ascii=False)}")
        elif isinstance(b, ToolResultBlock):
            parts.append(b.text)
    text = "\n".join(parts)
    if len(text) > HEAD_CHARS + TAIL_CHARS:
        text = text[:HEAD_CHARS] + "\n…\n" + text[-TAIL_CHARS:]
    return text.replace("\x00", "")


INSERT = "INSERT INTO messages_fts (text, thread_id, seq) VALUES (:text, :thread_id, :seq)"
"""A message's search row, in the transaction of the message (either dialect's index table)."""

_WORD = re.compile(r"[^\W_]+")


def tsquery(query: str) -> str:
    """User text → a PostgreSQL ``to_tsquery`` string with the same meaning as ``fts5_query``:
    punctuation splits words (as in the indexed text), a term's words must be adjacent."""
    parts = []
    for term in terms(query):
        words = [w.lower() for w in _WORD.findall(term)]
        if words:
            parts.append("(" + " <-> ".join(f"'{w}'" for w in words) + ")")
    return " & ".join(parts)


def _pg_search_sql(*, by_job: bool) -> str:
    """The PostgreSQL search statement, the same hits in the same order as SQLite's (best rank
    first, ties newest thread first, then by seq), in the same shape: the page is chosen on the
    index table alone, then only its hits are joined to ``messages`` and given a headline
    (``ts_headline`` parses the text again), whatever the planner would have postponed."""
    job = " AND f.thread_id IN (SELECT id FROM threads WHERE job_id = :job)" if by_job else ""
    return (
        "SELECT h.thread_id, h.seq, m.role,"
        " ts_headline('simple', f.text, to_tsquery('simple', :q), :opts) AS snip"
        " FROM (SELECT f.thread_id, f.seq, ts_rank(f.tsv, qq) AS r"
        "  FROM messages_fts f CROSS JOIN to_tsquery('simple', :q) qq"
        f"  WHERE f.tsv @@ qq{job}"
        "  ORDER BY r DESC, f.thread_id DESC, f.seq LIMIT :n) h"
        " JOIN messages_fts f ON f.thread_id = h.thread_id AND f.seq = h.seq"
        " JOIN messages m ON m.thread_id = h.thread_id AND m.seq = h.seq"
        " ORDER BY h.r DESC, h.thread_id DESC, h.seq"
    )


def search(tx: Tx, query: str, *, job_id: str | None, limit: int) -> list[SearchHit]:
    """``Store.search``: FTS5's statements on SQLite (``fts5_rows``), tsvector's on
    PostgreSQL; the same hits in the same order either way."""
    if not tx.postgres:
        return hits(fts5_rows(tx.fetchall, query, job_id=job_id, limit=limit))
    q = tsquery(query)
    if not q:
        return []
    markers = hit_markers()
    opts = (
        f"StartSel={markers[0]}, StopSel={markers[1]},"
        f" MaxWords={SNIPPET_WORDS}, MinWords=6, MaxFragments=1"
    )
    params: dict[str, Any] = {"q": q, "n": min(limit, MAX_ROWS), "job": job_id, "opts": opts}
    rows = tx.fetchall(_pg_search_sql(by_job=bool(job_id)), params)
    return hits([(t, int(seq), role, *unmark(str(snip), markers)) for t, seq, role, snip in rows])


def hits(rows: Sequence[Sequence[Any]]) -> list[SearchHit]:
    """Search hits of ``(thread_id, seq, role, snippet, marks)`` rows (``unmark``)."""
    return [
        SearchHit(thread_id=t, seq=seq, role=role, snippet=snip, marks=marks)
        for t, seq, role, snip, marks in rows
    ]
