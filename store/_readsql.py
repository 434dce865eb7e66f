"""The read statements the store's modules share: the fork-chain rule and the SQL that walks a
chain and reads its segments, a thread's row by id, prefix or end, the usage sums, and the FTS5
query syntax and search statement. Standard library only: the read-only fast path
(``rawread``) runs them too, without SQLAlchemy."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from .errors import AmbiguousRef, SearchQueryError, ThreadNotFound
from .refs import format_ref, is_full_id, prefix_upper

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


CHAIN_SQL = """
WITH RECURSIVE chain(id, parent, after, head, depth) AS (
    SELECT id, forked_from_id, COALESCE(forked_at_seq, 0), head_seq, 0 FROM threads WHERE id = :id
    UNION ALL
    SELECT t.id, t.forked_from_id, COALESCE(t.forked_at_seq, 0), t.head_seq, c.depth + 1
    FROM threads t JOIN chain c ON t.id = c.parent
)
SELECT id, after, head FROM chain ORDER BY depth
"""
"""A thread's ancestry, the thread first: (id, owns seqs after this, head_seq) per row."""

HEAD_SQL = "SELECT head_seq FROM threads WHERE id = :id"
"""A thread's head alone, for a reader that knows its ancestry already (it never changes)."""

HISTORY_SQL = (
    "SELECT content, role, created_at FROM messages"
    " WHERE thread_id = :owner AND seq BETWEEN :lo AND :hi ORDER BY seq"
)
"""One segment of a visible history (owner, lo, hi from ``segments``) as ``(content, role,
created_at)`` rows: the owner and the seqs
(``lo..hi``, every one of them stored) are the segment's (``_stored.segment_messages``)."""

JOINED_SEP = "\x1f"
"""What joins the roles and the timestamps of a ``JOINED_CHUNK_SQL`` row (neither holds it)."""

JOINED_CHUNK_SQL = (
    "SELECT count(*), group_concat(content, ','),"
    f" group_concat(role, '{JOINED_SEP}'), group_concat(created_at, '{JOINED_SEP}')"
    " FROM (SELECT content, role, created_at FROM messages"
    " WHERE thread_id = :owner AND seq BETWEEN :lo AND :hi ORDER BY seq)"
)
"""``HISTORY_SQL``'s rows of a chunk of a segment as one row: (count, the contents joined by
commas, the roles and the timestamps each joined by ``JOINED_SEP``), in seq order — the
aggregate reads its ordered subquery in order, which SQLite never flattens into an aggregate
(``_stored.joined_chunk``)."""


THREAD_COLUMNS = (
    "id, kind, title, status, parent_id, forked_from_id, forked_at_seq, job_id, task,"
    " system_prompt, tools, model, result, error, version, head_seq, lease_owner,"
    " lease_expires_at, created_at, updated_at, continues_id,"
    " (SELECT c.id FROM threads c WHERE c.continues_id = threads.id) AS continued_by"
)
THREAD_SELECT = f"SELECT {THREAD_COLUMNS} FROM threads"
"""A thread's row, in ``ThreadInfo``'s field order (``_threads.thread_from_row``); the last
column, the thread that continues it, is found through ``continues_id``'s unique index."""


def thread_row(tx: Any, ident: str, *, suffix: bool = False) -> Sequence[Any]:
    """The ``THREAD_SELECT`` row of the thread ``ident`` names: a full id, or the one thread
    whose id starts with it — with ``suffix``, ends with it (a ref by its end, ``T-…x2p4``)
    (``AmbiguousRef`` lists up to ten; ``ThreadNotFound``).

    A prefix is a half-open range ``[prefix, prefix_upper(prefix))`` compared byte by byte:
    SQLite compares our columns with BINARY (so its primary-key index still serves the range);
    PostgreSQL compares ``COLLATE "C"``, since under a linguistic collation (ICU en-US,
    en_US.UTF-8) neither ``'~'`` nor any other character is guaranteed to sort after every id
    character (``id < p || '~'`` matched nothing there)."""
    if is_full_id(ident):
        rows: list[Sequence[Any]] = tx.fetchall(THREAD_SELECT + " WHERE id = :id", {"id": ident})
        if not rows:
            raise ThreadNotFound(f"no thread {format_ref(ident)}")
        return rows[0]
    col = 'id COLLATE "C"' if tx.postgres else "id"
    if suffix:
        # id characters only, so no LIKE wildcard to escape; no index serves an id's end: the
        # threads table is scanned, one row a thread
        shown = "T-…" + ident
        rows = tx.fetchall(
            f"{THREAD_SELECT} WHERE {col} LIKE :end ORDER BY id LIMIT 11", {"end": "%" + ident}
        )
    else:
        shown = format_ref(ident)
        rows = tx.fetchall(
            f"{THREAD_SELECT} WHERE {col} >= :lo AND {col} < :hi ORDER BY id LIMIT 11",
            {"lo": ident, "hi": prefix_upper(ident)},
        )
    if not rows:
        raise ThreadNotFound(f"no thread matches {shown}")
    if len(rows) > 1:
        cands = [format_ref(r[0]) for r in rows[:10]]
        more = " …" if len(rows) > 10 else ""
        raise AmbiguousRef(f"{shown} is ambiguous: {', '.join(cands)}{more}", cands)
    return rows[0]


def every_id(tx: Any) -> list[str]:
    """Every thread's id (``refs.shortest_refs`` needs them all to know what is unique)."""
    return [str(r[0]) for r in tx.fetchall("SELECT id FROM threads")]


def revision(tx: Any) -> str | None:
    """The schema's Alembic revision (None: not migrated yet)."""
    if tx.postgres:
        found = tx.fetchone("SELECT to_regclass('alembic_version') IS NOT NULL")
        if not (found and found[0]):
            return None
    elif not tx.fetchall(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
    ):
        return None
    rows = tx.fetchall("SELECT version_num FROM alembic_version")
    return str(rows[0][0]) if rows else None


def usage_totals(tx: Any, *, thread_id: str | None, job_id: str | None) -> list[tuple[Any, ...]]:
    """``store.usage.totals``'s statement (the fast path's too): usage summed per thread,
    ``(thread_id, input, output, cache read, cache creation, cost, responses)`` by thread id:
    of one thread, of every thread of a job, or of every thread."""
    sql = (
        "SELECT usage.thread_id, coalesce(sum(usage.input_tokens), 0),"
        " coalesce(sum(usage.output_tokens), 0), coalesce(sum(usage.cache_read_input_tokens), 0),"
        " coalesce(sum(usage.cache_creation_input_tokens), 0), coalesce(sum(usage.cost_usd), 0.0),"
        " count(*) FROM usage"
    )
    where = []
    if job_id is not None:
        sql += " JOIN threads ON threads.id = usage.thread_id"
        where.append("threads.job_id = :job")
    if thread_id is not None:
        where.append("usage.thread_id = :thread")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " GROUP BY usage.thread_id ORDER BY usage.thread_id"
    rows = tx.fetchall(sql, {"job": job_id, "thread": thread_id})
    return [
        (r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]), float(r[5]), int(r[6])) for r in rows
    ]


def segments(
    head: int, chain: Sequence[tuple[str, int]], start: int, end: int | None
) -> list[tuple[str, int, int]]:
    """Which rows hold messages ``start..end`` of a thread whose head is ``head`` and whose
    ancestry is ``chain`` ([(owner, owns seqs after this)…], the thread first): [(owner, lo, hi)]
    in seq order."""
    upper = head if end is None else min(end, head)
    out: list[tuple[str, int, int]] = []
    for owner, after in chain:
        lo = max(start, after + 1)
        if lo <= upper:
            out.append((owner, lo, upper))
        upper = min(upper, after)  # an ancestor's segment never reaches past ``end``
        if upper < start:
            break
    out.reverse()
    return out


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
    only the hits at or above the cut — the page and its ties — are looked up, ordered by the
    full key and cut to ``:n``, their snippets made. The result is the single statement's
    (rank, snippet and joins for every hit, then ``LIMIT``), hit for hit; a test holds the two
    equal. Within a job, the job's threads are chosen before ranking."""
    job = " AND f.thread_id IN (SELECT id FROM threads WHERE job_id = :job)" if by_job else ""
    return (
        "WITH hits AS MATERIALIZED ("
        " SELECT f.rowid AS rid, f.rank AS r FROM messages_fts f"
        f" WHERE messages_fts MATCH :q{job}),"
        " cut AS (SELECT r FROM hits ORDER BY r LIMIT 1 OFFSET max(:n, 1) - 1),"
        " top AS (SELECT rid, r FROM hits"
        "  WHERE :n < 1 OR NOT EXISTS (SELECT 1 FROM cut) OR r <= (SELECT r FROM cut))"
        " SELECT f.thread_id, f.seq, m.role,"
        f" snippet(messages_fts, 0, :open, :close, '…', {SNIPPET_WORDS}) AS snip"
        " FROM top CROSS JOIN messages_fts f"
        " JOIN messages m ON m.thread_id = f.thread_id AND m.seq = f.seq"
        " WHERE messages_fts MATCH :q AND f.rowid = top.rid"
        " ORDER BY top.r, f.thread_id DESC, f.seq LIMIT :n"
    )


MAX_ROWS = 1 << 40
"""The most rows a listing or a search returns whatever limit it is given: more than any
database holds, and within SQLite's (and PostgreSQL's) 64-bit integers once the readers have
added their one or two."""


def row_limit(limit: int | None) -> int | None:
    """``limit`` kept within ``MAX_ROWS`` (a limit of 2**63 was an OverflowError)."""
    return None if limit is None else min(limit, MAX_ROWS)


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
