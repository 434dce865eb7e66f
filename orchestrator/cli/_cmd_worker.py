"""``threadloom worker``: this host executes worker runs of ``executor = "temporal"`` jobs
(README §Scale-out). The Temporal SDK is imported only when this command runs."""

from __future__ import annotations

import click

from ._app import Output, command, get_app, run_async


@command("worker", short_help="Run worker threads of Temporal jobs on this host.")
@click.option(
    "--slots",
    type=click.IntRange(1, 1024),
    default=4,
    show_default=True,
    help="Worker runs this host executes at once.",
)
@click.option(
    "--temporal-address",
    metavar="HOST:PORT",
    envvar="THREADLOOM_TEMPORAL_ADDRESS",
    help="The Temporal cluster (env THREADLOOM_TEMPORAL_ADDRESS; default localhost:7233).",
)
@click.option(
    "--task-queue", default="threadloom", show_default=True, help="The jobs' [job] task_queue."
)
@click.pass_context
def worker(ctx: click.Context, slots: int, temporal_address: str | None, task_queue: str) -> None:
    """Execute worker threads of Temporal jobs until Ctrl-C (or SIGTERM).

    Every host shares the PostgreSQL --db. A host that dies has its threads resumed on another
    (orphaned tool calls answered as after any crash; nothing re-run, nothing lost).
    """
    app = get_app(ctx)

    async def go() -> Output:
        from ..api import Orchestrator

        url, create_dirs = app.database()
        async with await Orchestrator.open(url, create_dirs=create_dirs) as orch:
            await orch.serve_worker(address=temporal_address, task_queue=task_queue, slots=slots)
        return Output(None)

    run_async(ctx, go)
