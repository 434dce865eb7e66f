"""``threadloom mcp``: threadloom as the subagent system of any MCP client (SPEC §Wave 2 — MCP
server). The ``mcp`` SDK is imported only when this command runs."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import CliError
from ._app import Output, command, get_app, run_async


@command("mcp")
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (bind 127.0.0.1).",
)
@click.option("--model", metavar="SPEC", help="Default model of the clients' workers.")
@click.option("--worker-model", metavar="SPEC", help="Default workers' model (else --model).")
@click.option(
    "--budget-tokens",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Token budget of each client's job; 0: none.",
)
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1, max=256),
    default=4,
    show_default=True,
    help="Workers running at once in each client's job.",
)
@click.pass_context
def mcp(
    ctx: click.Context,
    http: str | None,
    model: str | None,
    worker_model: str | None,
    budget_tokens: int,
    max_parallel: int,
) -> None:
    """Serve the Model Context Protocol (stdio by default) for Claude Code, Codex, Cursor.

    The client's agent is the lead: dispatch, wait, read_thread, ask_thread, resume_thread,
    fork_thread and more, over the same --db as every command. Keys come from this process's
    environment."""
    import importlib.util

    from workers.providers import parse_model_spec

    if importlib.util.find_spec("mcp") is None:
        raise CliError(
            "mcp: the MCP server needs the mcp SDK, not installed: pip install 'threadloom[mcp]'"
        )
    from ..mcp import Settings, parse_http, serve

    for spec in (model, worker_model):
        if spec:
            parse_model_spec(spec)
    address = parse_http(http) if http is not None else None  # --http '' is no address
    settings = Settings(
        model=model,
        worker_model=worker_model,
        budget_tokens=budget_tokens,
        max_parallel=max_parallel,
        cwd=Path.cwd(),
    )
    db, create_dirs = get_app(ctx).database()

    async def go() -> Output:
        await serve(db, create_dirs=create_dirs, settings=settings, http=address)
        return Output(None)

    run_async(ctx, go)
