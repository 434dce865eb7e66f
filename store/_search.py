"""The full-text index over message text: SQLite FTS5 or PostgreSQL tsvector + GIN.

Rows are written in the same transaction as the message they index. Each message's searchable
text is its text, thinking, tool names and inputs, and tool outputs; of a very large message only
the first ``HEAD_CHARS`` and last ``TAIL_CHARS`` characters are indexed (PostgreSQL refuses a
tsvector over 1 MB; the transcript itself always keeps everything).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ._readsql import MAX_ROWS, SNIPPET_WORDS, fts5_rows, hit_markers, terms, unmark
from ._sqlite import Tx
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
    """``Store.search``: FTS5's statements on SQLite (``_readsql.fts5_rows``), tsvector's on
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
    """Search hits of ``(thread_id, seq, role, snippet, marks)`` rows (``_readsql.unmark``)."""
    return [
        SearchHit(thread_id=t, seq=seq, role=role, snippet=snip, marks=marks)
        for t, seq, role, snip, marks in rows
    ]
