"""``threadloom serve``: the web viewer (``orchestrator.web``) over ``--db``."""

from __future__ import annotations

import click

from ..errors import CliError
from ._app import command, get_app


def require_web(what: str, *, server: bool = False) -> None:
    """The ``web`` extra, or one line (exit 2) naming the install command."""
    from ..web import WebUnavailable
    from ..web import require_web as check

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
    help="Address to bind (only loopback Host headers are answered on a loopback address).",
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="TCP port."
)
@click.pass_context
def serve(ctx: click.Context, host: str, port: int) -> None:
    """Serve a read-only web view of the database until Ctrl-C.

    \b
    /             threads, newest first (filters: job, status, kind)
    /t/T-…        one thread as one page; /t/T-…#7 is message 7
    /job/T-…      the job tree
    /search?q=    full-text search, hits linking to their message

    A running thread's page follows new messages live. Transcript text is always escaped.
    Needs the web extra: pip install 'threadloom[web]'.
    """
    require_web("serve", server=True)
    app = get_app(ctx)
    app.setup_logging()
    db, create_dirs = app.database()
    from ..web import serve as run

    try:
        run(db, host=host, port=port, create_dirs=create_dirs)
    except OSError as err:
        raise CliError(f"serve: {err.strerror or err}") from None
