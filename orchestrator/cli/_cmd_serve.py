"""``threadloom serve``: the web viewer (``orchestrator.web``) over ``--db``."""

from __future__ import annotations

import click

from ..errors import CliError
from ._app import command, get_app


def require_web(what: str, *, server: bool = False) -> None:
    """The ``web`` extra, or one line (exit 2) naming the install command."""
    from ..web import WebUnavailable, require_web as check

    try:
        check(what, server=server)
    except WebUnavailable as exc:
        raise CliError(str(exc)) from None


def _host(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # an empty host (an unset shell variable) binds every interface, and no Host header is
    # checked there: only a named address does that, on purpose
    if not value.strip():
        raise click.BadParameter(
            "must not be empty (name the address to bind; 0.0.0.0 for every interface)",
            ctx,
            param,
        )
    return value


@command("serve", short_help="Serve a read-only web view of every thread.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    callback=_host,
    help="Address to bind. Beyond the loopback every transcript is open to the network: add"
    " a token.",
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="TCP port."
)
@click.option(
    "--require-token",
    is_flag=True,
    help="Answer only requests with a token, generated now and printed once (a browser opens"
    " the printed link once).",
)
@click.option(
    "--token-file",
    metavar="PATH",
    help="Answer only requests with the token in this file (implies --require-token).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    metavar="NAME",
    multiple=True,
    help="Also answer requests whose Host is NAME (besides this machine's names and"
    " addresses); repeatable.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    require_token: bool,
    token_file: str | None,
    allow_hosts: tuple[str, ...],
) -> None:
    """Serve a read-only web view of the database until Ctrl-C.

    \b
    /             threads, newest first (filters: job, status, kind)
    /t/T-…        one thread as one page; /t/T-…#7 is message 7
    /job/T-…      the job tree
    /search?q=    full-text search, hits linking to their message

    A running thread's page follows new messages live. Transcript text is always escaped.
    Only requests naming this machine (or an --allow-host) in their Host header are answered,
    so no other site can read the transcripts through DNS rebinding; with a token, only
    requests that carry it. Needs the web extra: pip install 'threadloom[web]'.
    """
    from ..exposure import check_allowed_host, new_token, read_token

    require_web("serve", server=True)
    for name in allow_hosts:
        check_allowed_host(name)
    token = read_token(token_file) if token_file else new_token() if require_token else None
    app = get_app(ctx)
    app.setup_logging()
    db, create_dirs = app.database()
    from ..web import serve as run

    try:
        run(
            db,
            host=host,
            port=port,
            create_dirs=create_dirs,
            allow_hosts=allow_hosts,
            token=token,
            token_file=token_file,
        )
    except OSError as err:
        raise CliError(f"serve: {err.strerror or err}") from None
