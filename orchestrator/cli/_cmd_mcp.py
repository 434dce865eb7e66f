"""``threadloom mcp``: threadloom as the subagent system of any MCP client (SPEC §Wave 2 — MCP
server). The ``mcp`` SDK is imported only when this command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import CliError
from ._app import Output, command, get_app, run_async


@command("mcp", run_options="server")
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (bind 127.0.0.1);"
    " every request needs the bearer token.",
)
@click.option(
    "--token-file",
    metavar="PATH",
    help="With --http: the bearer token clients send (else one is generated and printed once).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    metavar="NAME",
    multiple=True,
    help="With --http: also answer requests whose Host is NAME (besides this machine's names"
    " and addresses); repeatable.",
)
@click.option(
    "--allow-endpoint",
    "endpoints",
    metavar="URL",
    multiple=True,
    help="An OpenAI-compatible endpoint a client's model may name besides those of --model and"
    " --worker-model (the server's OPENAI_API_KEY goes there); repeatable.",
)
@click.option(
    "--allow-scripted",
    is_flag=True,
    help="Let clients name scripted models of their own (they choose the workers' tool calls).",
)
@click.pass_context
def mcp(
    ctx: click.Context,
    /,
    http: str | None,
    token_file: str | None,
    allow_hosts: tuple[str, ...],
    endpoints: tuple[str, ...],
    allow_scripted: bool,
    **options: Any,
) -> None:
    """Serve the Model Context Protocol (stdio by default) for Claude Code, Codex, Cursor.

    The client's agent is the lead: dispatch, wait, read_thread, ask_thread, resume_thread,
    fork_thread and more, over the same --db as every command. Keys come from this process's
    environment; a client's model may only send them where --model, --worker-model and
    --allow-endpoint say. Work a client starts stays in its roots."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        raise CliError(
            "mcp: the MCP server needs the mcp SDK, not installed: pip install 'threadloom[mcp]'"
        )
    from ..exposure import check_allowed_host, new_token, read_token
    from ..mcp import Http, Settings, parse_http, serve
    from ..model_policy import ModelPolicy

    address = parse_http(http) if http is not None else None  # --http '' is no address
    if address is None and (token_file or allow_hosts):
        flag = "--token-file" if token_file else "--allow-host"
        raise CliError(f"mcp: {flag} is for --http (stdio has no token nor Host)")
    door = None
    if address is not None:
        for name in allow_hosts:
            check_allowed_host(name)
        token = read_token(token_file) if token_file else new_token()
        door = Http(*address, token=token, token_file=token_file, allow_hosts=allow_hosts)
    settings = Settings(
        **options, cwd=Path.cwd(), endpoints=endpoints, allow_scripted=allow_scripted
    )
    # the server's own specs parse and the allowed endpoints are URLs, or exit 2 now
    specs = (settings.model, settings.worker_model)
    ModelPolicy.of(specs, endpoints=endpoints, base_dir=Path.cwd())
    db, create_dirs = get_app(ctx).database()

    async def go() -> Output:
        await serve(db, create_dirs=create_dirs, settings=settings, http=door)
        return Output(None)

    run_async(ctx, go)
