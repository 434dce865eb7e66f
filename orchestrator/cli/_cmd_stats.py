"""The database as a whole: ``stats`` and ``migrate``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click

from ._app import Output, command, run_command
from ._render import Column, Printer, count, one_line, percent, usd

if TYPE_CHECKING:
    from store import Store, ThreadInfo, Usage


@command("stats", short_help="Tokens, cost and cache-read share per thread and job.")
@click.argument("ref", required=False)
@click.pass_context
def stats(ctx: click.Context, ref: str | None) -> None:
    """Tokens and estimated cost per thread and per job, and the cache-read share of input.

    With REF: every thread of the job around REF, and the job's total. Without: one row per
    job that used any tokens, and the total. The cache-read share is
    cache_read / (input + cache_read + cache_write); the cost is the estimate recorded with each
    model response (list prices; unknown and local models count $0).

    --json: {threads: [{ref, usage, cost_usd, …}], jobs: [{ref, usage, cost_usd, threads}],
    total: {usage, cost_usd}} — threads lists every thread with usage (with REF: every thread
    of the job).
    """
    from ..views import cache_share, usage_json

    async def go(store: Store) -> Output:
        from store import Usage

        if ref:
            focus = (await store.resolve(ref)).thread
            infos = await store.job_tree(focus.job_id)
            totals = {t.thread_id: t for t in await store.usage.totals(job_id=focus.job_id)}
        else:
            totals = {t.thread_id: t for t in await store.usage.totals()}
            infos = [t for t in await store.list_threads(oldest_first=True) if t.id in totals]
        by_id = {t.id: t for t in infos}

        def usage_of(tid: str) -> Usage:
            return totals[tid].usage if tid in totals else Usage()

        def cost_of(tid: str) -> float:
            return totals[tid].cost_usd if tid in totals else 0.0

        threads = [
            {
                "ref": t.ref,
                "kind": str(t.kind),
                "title": t.title,
                "job": f"T-{t.job_id}",
                "usage": usage_json(usage_of(t.id)),
                "cost_usd": cost_of(t.id),
                "responses": totals[t.id].responses if t.id in totals else 0,
                "cache_read_share": cache_share(usage_of(t.id)),
            }
            for t in infos
        ]
        jobs: dict[str, list[ThreadInfo]] = {}
        for t in infos:
            jobs.setdefault(t.job_id, []).append(t)
        leads = {j: by_id.get(j) for j in jobs}
        missing = [j for j, lead in leads.items() if lead is None]
        for j in missing:  # a lead that used no tokens itself: still names its job
            leads[j] = await store.get_thread(j)
        per_job: list[tuple[str, str, int, Usage, float]] = []
        for j, members in jobs.items():
            lead = leads[j]
            per_job.append(
                (
                    f"T-{j}",
                    lead.title if lead else "",
                    len(members),
                    _sum(usage_of(t.id) for t in members),
                    sum(cost_of(t.id) for t in members),
                )
            )
        job_rows = [
            {
                "ref": jref,
                "title": title,
                "threads": n,
                "usage": usage_json(u),
                "cost_usd": cost,
                "cache_read_share": cache_share(u),
            }
            for jref, title, n, u, cost in per_job
        ]
        total_usage = _sum(usage_of(t.id) for t in infos)
        total_cost = sum(cost_of(t.id) for t in infos)
        data: dict[str, Any] = {
            "threads": threads,
            "jobs": job_rows,
            "total": {
                "usage": usage_json(total_usage),
                "cost_usd": total_cost,
                "cache_read_share": cache_share(total_usage),
            },
        }

        def text(p: Printer) -> None:
            if ref:
                head = [Column("THREAD"), Column("KIND"), Column("TITLE", wrap=True)]
                rows = [
                    [
                        t.ref,
                        str(t.kind),
                        one_line(t.title, 50),
                        *_cells(usage_of(t.id), cost_of(t.id)),
                    ]
                    for t in infos
                ]
            else:
                head = [Column("JOB"), Column("THREADS", "right"), Column("TITLE", wrap=True)]
                rows = [
                    [jref, str(n), one_line(title, 50), *_cells(u, cost)]
                    for jref, title, n, u, cost in per_job
                ]
            if not rows:
                click.echo("no usage recorded", err=True)
                return
            label = "job total" if ref else "total"
            rows.append([label, "", "", *_cells(total_usage, total_cost)])
            p.table([*head, *_NUMBER_COLUMNS], rows)

        return Output(data, text)

    run_command(ctx, go)


_NUMBER_COLUMNS = [
    Column("INPUT", "right"),
    Column("OUTPUT", "right"),
    Column("CACHE READ", "right"),
    Column("CACHE WRITE", "right"),
    Column("CACHED", "right"),
    Column("COST", "right"),
]


def _cells(u: Usage, cost: float) -> list[str]:
    from ..views import cache_share

    return [
        count(u.input_tokens),
        count(u.output_tokens),
        count(u.cache_read_input_tokens),
        count(u.cache_creation_input_tokens),
        percent(cache_share(u)),
        usd(cost),
    ]


def _sum(usages: Iterable[Usage]) -> Usage:
    from store import Usage

    total = Usage()
    for u in usages:
        total = total + u
    return total


@command("migrate")
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Bring the database schema to the newest revision.

    Prints the revision before and after. Opening a database for any other command does this
    too; `migrate` does it explicitly and says what it did. --json: {database, before, after,
    upgraded}.
    """

    async def go(store: Store) -> Output:
        from store._schema import SCHEMA_HEAD

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
