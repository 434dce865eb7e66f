"""The database as a whole: ``stats`` and ``migrate``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..humanize import count
from ._app import Output, command, nothing_to_read, run_command
from ._read_views import on_terminal
from ._render import Column, Printer, one_line, percent, usd

if TYPE_CHECKING:
    from store import Store


@command("stats", short_help="Tokens, cost and cache-read share per thread and job.")
@click.argument("ref", required=False)
@click.pass_context
def stats(ctx: click.Context, ref: str | None) -> None:
    """Tokens and estimated cost per thread and per job, and the cache-read share of input.

    With REF: every thread of the job around REF, and the job's total. Without: one row per
    job that used any tokens, counting every thread of it (as tree shows them, those that used
    none too), and the total. The cache-read share is
    cache_read / (input + cache_read + cache_write); the cost is the estimate recorded with each
    model response (list prices; unknown and local models count $0).

    --json: {threads: [{ref, usage, cost_usd, …}], jobs: [{ref, usage, cost_usd, threads}],
    total: {usage, cost_usd}} — threads lists every thread of those jobs (with REF: of the job).
    """
    from ..views import stats_json

    if not ref and nothing_to_read(ctx, stats_json([], {}, {}), "no usage recorded"):
        return

    async def go(store: Store) -> Output:
        from ..api import Orchestrator

        data = await Orchestrator(store).stats(ref)
        short = None
        if on_terminal():  # a terminal too narrow for whole refs shows their short forms
            listed = data["threads"] if ref else data["jobs"]
            found = await store.short_refs([r["ref"].removeprefix("T-") for r in listed])
            short = {f"T-{i}": s for i, s in found.items()}

        def text(p: Printer) -> None:
            if ref:
                head = [Column("THREAD", ref=True), Column("KIND"), Column("TITLE", wrap=True)]
                rows = [
                    [t["ref"], t["kind"], one_line(t["title"], 50), *_cells(t)]
                    for t in data["threads"]
                ]
            else:
                head = [
                    Column("JOB", ref=True),
                    Column("THREADS", "right"),
                    Column("TITLE", wrap=True),
                ]
                rows = [
                    [j["ref"], str(j["threads"]), one_line(j["title"], 50), *_cells(j)]
                    for j in data["jobs"]
                ]
            if not rows:
                click.echo("no usage recorded", err=True)
                return
            label = "job total" if ref else "total"
            rows.append([label, "", "", *_cells(data["total"])])
            p.table([*head, *_NUMBER_COLUMNS], rows, short=short)

        return Output(data, text)

    run_command(ctx, go, create=False, refs=[ref] if ref else ())


_NUMBER_COLUMNS = [
    Column("INPUT", "right"),
    Column("OUTPUT", "right"),
    Column("CACHE READ", "right"),
    Column("CACHE WRITE", "right"),
    Column("CACHED", "right"),
    Column("COST", "right"),
    Column("VERIFIED", "right"),
]


def _cells(row: dict[str, Any]) -> list[str]:
    """The number columns of a ``stats`` row (``views.stats_json``: usage, share, cost, and
    the share of its checked claims that were verified)."""
    u = row["usage"]
    return [
        count(u["input_tokens"]),
        count(u["output_tokens"]),
        count(u["cache_read_input_tokens"]),
        count(u["cache_creation_input_tokens"]),
        percent(row["cache_read_share"]),
        usd(row["cost_usd"]),
        _verified(row["checked_claims"]),
    ]


def _verified(checked: dict[str, Any]) -> str:
    """The share of checked claims that were verified, with the count (``–``: none checked)."""
    if not checked["claims"]:
        return "—"
    return f"{percent(checked['share'])} of {checked['claims']}"


@command("migrate")
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Bring the database schema to the newest revision.

    Prints the revision before and after. Opening a database for any other command does this
    too; `migrate` does it explicitly and says what it did. --json: {database, before, after,
    upgraded}.
    """

    async def go(store: Store) -> Output:
        from store import SCHEMA_HEAD

        from ..logging import get_logger

        before = await store.db.migrate()
        upgraded = before is not None
        was = before if before is not None else SCHEMA_HEAD
        where = store.db.display
        if upgraded:
            get_logger(__name__).info(
                "database.migrated", database=where, before=was, after=SCHEMA_HEAD
            )
            text = f"{where}: schema upgraded from {was} to {SCHEMA_HEAD}\n"
        else:
            text = f"{where}: schema already at the newest revision ({SCHEMA_HEAD})\n"
        data = {"database": where, "before": was, "after": SCHEMA_HEAD, "upgraded": upgraded}
        return Output(data, text)

    run_command(ctx, go, migrate=False)
