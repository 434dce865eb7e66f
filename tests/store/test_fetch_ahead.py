"""``SqliteTx.fetch_each`` fetches a run of single-row statements ahead on a helper thread while
its caller works on the rows before (``_history.History.read_range`` reads a long history's
chunks this way): the rows are the sequential ones, in order; SQLite's error comes where its
row would have; a caller that stops early or fails stops the helper, and the connection is its
own again afterwards."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from store._sqlite import AHEAD, Row, SqliteTx, Tx

SQL = "SELECT :i, (SELECT count(*) FROM t WHERE n <= :i), CASE WHEN :i = :bad THEN json('x') END"
"""One row for ``:i``: the count of rows up to it; SQLite's "malformed JSON" when ``:i = :bad``."""


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    path = tmp_path / "t.db"
    with closing(sqlite3.connect(path)) as setup, setup:
        setup.execute("CREATE TABLE t (n INTEGER)")
        setup.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(1000)])
    c = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    yield c
    c.close()


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tl-fetch-ahead"]


def _row(row: Row | None) -> Row:
    assert row is not None
    return row


def _params(n: int, bad: int = -1) -> list[dict[str, int]]:
    return [{"i": i, "bad": bad} for i in range(n)]


def test_the_rows_are_the_sequential_ones_in_order(conn: sqlite3.Connection) -> None:
    tx = SqliteTx(conn)
    params = _params(3 * AHEAD + 5)
    ahead = list(tx.fetch_each(SQL, params))
    assert ahead == list(Tx.fetch_each(tx, SQL, params))
    assert [tuple(_row(r)) for r in ahead] == [(i, i + 1, None) for i in range(len(params))]
    assert not _helpers()


def test_sqlites_error_comes_where_its_row_would_have(conn: sqlite3.Connection) -> None:
    got: list[int] = []

    def read() -> None:
        rows = SqliteTx(conn).fetch_each(SQL, _params(40, bad=AHEAD + 1))
        got.extend(_row(row)[0] for row in rows)

    with pytest.raises(sqlite3.OperationalError, match="malformed JSON"):
        read()
    assert got == list(range(AHEAD + 1))
    assert not _helpers()
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (1000,)


def test_a_caller_that_stops_early_stops_the_helper(conn: sqlite3.Connection) -> None:
    """The helper is blocked on a full queue when the caller leaves: it is let go and joined."""
    rows = SqliteTx(conn).fetch_each(SQL, _params(10 * AHEAD))
    assert _row(next(rows))[0] == 0
    threading.Event().wait(0.2)  # the helper fills its queue meanwhile and waits
    assert len(_helpers()) == 1
    rows.close()
    assert not _helpers()
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (1000,)


def test_a_caller_that_fails_stops_the_helper(conn: sqlite3.Connection) -> None:
    def read() -> None:
        with closing(SqliteTx(conn).fetch_each(SQL, _params(10 * AHEAD))) as rows:
            for row in rows:
                _ = 1 / (3 - _row(row)[0])

    with pytest.raises(ZeroDivisionError):
        read()
    assert not _helpers()


def test_one_statement_is_fetched_on_the_callers_thread(conn: sqlite3.Connection) -> None:
    seen = []
    conn.set_trace_callback(lambda _: seen.append(threading.current_thread()))
    assert [_row(r)[0] for r in SqliteTx(conn).fetch_each(SQL, _params(1))] == [0]
    assert seen == [threading.current_thread()]
