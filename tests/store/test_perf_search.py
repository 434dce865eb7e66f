"""Search ranks every hit but builds snippets, joins messages and reads tie-break columns only
for the hits it returns (issue 11): the hits and their order are the ones the single statement
that did all of that for every hit gave, on SQLite and PostgreSQL — many hits, ties across the
cut, limits around the number of hits, within a job, phrases. On SQLite the first statement
keeps only the best ``limit + TOP_SLACK`` hits; when the ties of the page's last rank may reach
past them, the full statement answers instead: the same hits either way."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from store import NewMessage, SearchHit, Store, _search
from store._search import SNIPPET_WORDS, fts5_query, fts5_rows, tsquery
from store._sqlite import Tx

WORDS = [
    "parser",
    "lexer",
    "token",
    "stream",
    "buffer",
    "index",
    "cursor",
    "module",
    "error",
    "fixture",
]


def _reference_sql(dialect: str, *, by_job: bool) -> str:
    """The statement search ran before issue 11, kept here as the oracle of order and snippet:
    rank, snippet and joins for every hit, then the limit."""
    if dialect == "sqlite":
        return (
            "SELECT f.thread_id, f.seq, m.role,"
            f" snippet(messages_fts, 0, '[', ']', '…', {SNIPPET_WORDS}) AS snip"
            " FROM messages_fts f"
            " JOIN messages m ON m.thread_id = f.thread_id AND m.seq = f.seq"
            " JOIN threads t ON t.id = f.thread_id"
            " WHERE messages_fts MATCH :q"
            + (" AND t.job_id = :job" if by_job else "")
            + " ORDER BY f.rank, f.thread_id DESC, f.seq LIMIT :n"
        )
    return (
        "SELECT f.thread_id, f.seq, m.role,"
        " ts_headline('simple', f.text, qq,"
        f" 'StartSel=[, StopSel=], MaxWords={SNIPPET_WORDS}, MinWords=6, MaxFragments=1')"
        " AS snip"
        " FROM messages_fts f CROSS JOIN to_tsquery('simple', :q) qq"
        " JOIN messages m ON m.thread_id = f.thread_id AND m.seq = f.seq"
        " JOIN threads t ON t.id = f.thread_id"
        " WHERE f.tsv @@ qq"
        + (" AND t.job_id = :job" if by_job else "")
        + " ORDER BY ts_rank(f.tsv, qq) DESC, f.thread_id DESC, f.seq LIMIT :n"
    )


async def _reference(store: Store, query: str, *, job_id: str | None, limit: int) -> list[Any]:
    def fn(tx: Tx) -> list[Any]:
        dialect = "postgresql" if tx.postgres else "sqlite"
        q = fts5_query(query) if dialect == "sqlite" else tsquery(query)
        params: dict[str, Any] = {"q": q, "n": limit}
        if job_id:
            params["job"] = job_id
        rows = tx.fetchall(_reference_sql(dialect, by_job=bool(job_id)), params)
        return [(r[0], int(r[1]), r[2], " ".join(str(r[3]).split())) for r in rows]

    return await store.db.read(fn)


def _bracketed(snippet: str, marks: list[tuple[int, int]]) -> str:
    """The snippet as the reference statement marks it: each match in [brackets]."""
    for start, end in reversed(marks):
        snippet = f"{snippet[:start]}[{snippet[start:end]}]{snippet[end:]}"
    return snippet


def _tuples(hits: list[SearchHit]) -> list[Any]:
    return [(h.thread_id, h.seq, h.role, _bracketed(h.snippet, h.marks)) for h in hits]


def _rows(rows: list[Any]) -> list[Any]:
    return [(t, seq, role, _bracketed(snip, marks)) for t, seq, role, snip, marks in rows]


async def _corpus(store: Store) -> list[str]:
    """Three jobs of threads whose messages repeat a small vocabulary: a common word hits most
    messages, and many hits tie on rank (same words, same length)."""
    rng = random.Random(11)
    jobs = []
    for j in range(3):
        lead = await store.create_thread(kind="lead", title=f"job {j}")
        jobs.append(lead.id)
        for w in range(3):
            tid = (
                lead.id
                if w == 0
                else (await store.create_thread(kind="worker", parent_id=lead.id)).id
            )
            msgs = []
            for i in range(40):
                if i % 4 == 0:  # identical texts: exact ties on rank
                    body = "parser error in module cursor index"
                else:
                    body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
                msgs.append(NewMessage.user(body) if i % 2 == 0 else NewMessage.assistant(body))
            await store.append(tid, msgs)
    return jobs


@pytest.mark.parametrize("slack", [_search.TOP_SLACK, 0, 3])
@pytest.mark.parametrize("query", ["parser", "parser error", '"parser error"', "cursor.index"])
async def test_search_returns_the_same_hits_in_the_same_order_as_before(
    store: Store, query: str, slack: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_search, "TOP_SLACK", slack)  # small: the ties overflow, full statement
    jobs = await _corpus(store)
    total = len(await _reference(store, query, job_id=None, limit=100_000))
    assert total > 20  # the point: more hits than a page, ties across the cut
    for limit in (1, 2, 7, 20, total - 1, total, total + 5):
        got = _tuples(await store.search(query, limit=limit))
        assert got == await _reference(store, query, job_id=None, limit=limit), limit
        assert len(got) == min(limit, total)
    for job in jobs:
        for limit in (1, 5, 20, 500):
            got = _tuples(await store.search(query, job_id=job, limit=limit))
            assert got == await _reference(store, query, job_id=job, limit=limit), (job, limit)
            assert {h[0] for h in got} <= {t.id for t in await store.job_tree(job)}


async def test_search_with_a_limit_of_zero_finds_nothing(store: Store) -> None:
    await _corpus(store)
    assert await store.search("parser", limit=0) == []


_RANKS = "SELECT bm25(messages_fts) AS r FROM messages_fts WHERE messages_fts MATCH ? ORDER BY r"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_the_full_statement_answers_only_when_ties_may_reach_past_the_kept_hits(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _corpus(store)  # every fourth message the same text: ties on the best rank
    conn = sqlite3.connect(Path(db_url))
    ran: list[str] = []

    def execute(sql: str, params: dict[str, Any]) -> list[Any]:
        ran.append("top" if "LIMIT :k" in sql else "full")
        return conn.execute(sql, params).fetchall()

    try:
        q = fts5_query("parser error")
        ranks = [r for (r,) in conn.execute(_RANKS, (q,))]
        n = next(i for i in range(1, len(ranks)) if ranks[i - 1] == ranks[i])  # a tie at the cut
        want = await _reference(store, "parser error", job_id=None, limit=n)
        assert _rows(fts5_rows(execute, "parser error", job_id=None, limit=n)) == want
        assert ran == ["top"]  # n + 500 kept: every tie of the n-th rank among them
        ran.clear()
        monkeypatch.setattr(_search, "TOP_SLACK", 1)  # n + 1 kept: the ties may run past
        assert _rows(fts5_rows(execute, "parser error", job_id=None, limit=n)) == want
        assert ran == ["top", "full"]
        ran.clear()
        assert fts5_rows(execute, "zzyzx", job_id=None, limit=5) == [] and ran == ["top"]
    finally:
        conn.close()
