"""The plumbing every ``threadloom`` command shares: the group, global options, ``Output``,
``run_command`` and the one place errors become exit codes. The commands live in their own
modules (``_cmd_*.py``), named in ``registry.COMMANDS`` and loaded only when named (so
``threadloom --help`` imports neither the store nor any SDK).

Adding a command::

    # orchestrator/cli/_cmd_example.py
    import click
    from orchestrator.cli import Output, command, run_command

    @command("example")
    @click.argument("ref")
    @click.pass_context
    def example(ctx: click.Context, ref: str) -> None:
        \"\"\"One line for the command list. More help below.\"\"\"

        async def go(store: Store) -> Output:
            info = (await store.resolve(ref)).thread
            return Output({"ref": info.ref}, text=f"{info.ref}\\n")

        run_command(ctx, go)

and one line in ``registry.COMMANDS``: ``"example": "orchestrator.cli._cmd_example:example"``.

``run_command`` opens the store named by ``--db``, runs the coroutine, prints ``Output.data`` as
one JSON document with ``--json`` or ``Output.text`` otherwise, and exits with
``Output.exit_code``. Errors are not caught by commands: they propagate to
``ThreadloomGroup.main``, which maps each to its exit code (``orchestrator.errors``) and reports
it as one line on stderr — plus ``{"error": {"code", "message"}}`` on stdout with ``--json``.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, get_args

import click

from workers import env_var, redact, redact_data

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, exit_code_for, one_line
from ._render import Printer, dumps, silence_stdout, visible, write_error, write_redacted
from .registry import COMMANDS

if TYPE_CHECKING:
    from store import Store

PROG = "threadloom"
DEFAULT_DB = Path(".threadloom") / "threads.db"


@dataclass
class AppContext:
    """The global options, shared by every command through ``ctx.obj``."""

    db: str | None = None
    json: bool = False
    verbose: int = 0
    log_json: bool = False
    _logging_ready: bool = False

    def database(self) -> tuple[str, bool]:
        """(URL or path, create its directory). Only the default location is created."""
        if self.db:
            return self.db, False
        return str(Path.cwd() / DEFAULT_DB), True

    def setup_logging(self) -> None:
        if not self._logging_ready:
            from ..logging import configure_logging

            configure_logging(self.verbose, self.log_json)
            self._logging_ready = True


@dataclass(frozen=True, slots=True)
class Output:
    """What a command produced: ``data`` is its ``--json`` document; ``text`` its text output,
    either a string written as is or a function that writes through a ``Printer``. Both are
    redacted (``workers.redact``) unless ``redact`` is False — transcripts shown or
    exported as the record (``show``/``export`` without ``--redact``). Control characters in
    the text are made visible (``_render.visible``) unless ``verbatim`` (``show --raw``,
    ``export``: the bytes as stored)."""

    data: Any
    text: str | Callable[[Printer], None] | None = None
    exit_code: int = 0
    redact: bool = True
    verbatim: bool = False


_CURRENT: ContextVar[AppContext | None] = ContextVar("threadloom_app", default=None)
_ARGV: ContextVar[Sequence[str]] = ContextVar("threadloom_argv", default=())
"""The command line ``ThreadloomGroup.main`` runs: whether ``--json`` was asked for is read
from it where no command has parsed it yet (an error, ``--version``)."""


def get_app(ctx: click.Context) -> AppContext:
    app = ctx.find_object(AppContext)
    if app is None:  # a command invoked on its own, without the group
        app = ctx.ensure_object(AppContext)
        _CURRENT.set(app)
    return app


def emit(app: AppContext, out: Output, *, stream: Any = None) -> None:
    """Print a command's output: JSON with ``--json``, text otherwise."""
    stdout = sys.stdout if stream is None else stream
    try:
        if app.json:
            stdout.write(dumps(redact_data(out.data) if out.redact else out.data) + "\n")
        elif isinstance(out.text, str):
            text = redact(out.text) if out.redact else out.text
            stdout.write(text if out.verbatim else visible(text))
        elif out.text is not None and not out.redact:
            out.text(Printer(stdout, verbatim=out.verbatim))
        elif out.text is not None:
            write_redacted(out.text, stdout, verbatim=out.verbatim)
        stdout.flush()
    except BrokenPipeError:  # the reader had enough (``threadloom show … | head``)
        silence_stdout()
    except OSError as err:
        from ..errors import EXIT_FAILED, CliError

        raise CliError(f"cannot write the output: {err.strerror or err}", EXIT_FAILED) from err


def missing_database(app: AppContext) -> Path | None:
    """The SQLite file ``--db`` names (``THREADLOOM_DB``, default ``.threadloom/threads.db``)
    when it does not exist, absolute; None when it does, for a URL (PostgreSQL), and for a
    ``--db`` whose directory does not exist either (opening it says so: a mistyped path)."""
    url, default = app.database()
    if "://" in url:
        return None
    path = Path(url).expanduser()
    if path.exists() or not (default or path.parent.is_dir()):
        return None
    return path.absolute()


def no_database(path: Path) -> str:
    """What a reading command says when there is no database to read: which file it looked
    for, and how one comes to be."""
    return (
        f"no database at {path} (threadloom demo or threadloom run creates it there;"
        " --db or THREADLOOM_DB names another)"
    )


async def open_store(
    app: AppContext, *, migrate: bool = True, create: bool = True, refs: Sequence[str] = ()
) -> Store:
    """The store named by ``--db`` (``THREADLOOM_DB``, default ``.threadloom/threads.db``),
    upgraded to the newest schema unless ``migrate=False``. ``create=False`` (a command that
    only reads, or needs a thread that exists): a SQLite file that does not exist is not
    created — exit 3, naming the file it looked for, unless one of ``refs`` (the command's)
    is bad syntax, which is said first (exit 2), as with a database."""
    from ..api import open_database
    from ..logging import get_logger

    missing = None if create else missing_database(app)
    if missing is not None:
        from store import ThreadRef

        from ..errors import EXIT_NOT_FOUND, CliError

        for ref in refs:
            ThreadRef.parse(ref)
        raise CliError(no_database(missing), EXIT_NOT_FOUND)
    url, create_dirs = app.database()
    store = await open_database(url, create_dirs=create_dirs, migrate=migrate)
    get_logger(__name__).debug("database.opened", database=store.db.display)
    return store


def run_async(ctx: click.Context, fn: Callable[[], Awaitable[Output]]) -> None:
    """Run a command's coroutine (no store opened for it), print its output, exit with its
    code. Errors propagate to the one handler in ``ThreadloomGroup.main``."""
    import asyncio

    app = get_app(ctx)
    app.setup_logging()
    out = asyncio.run(_awaited(fn))
    emit(app, out)
    if out.exit_code:
        ctx.exit(out.exit_code)


def run_command(
    ctx: click.Context,
    fn: Callable[[Store], Awaitable[Output]],
    *,
    migrate: bool = True,
    create: bool = True,
    refs: Sequence[str] = (),
) -> None:
    """``run_async`` with the store opened before ``fn`` and closed after it (``create``,
    ``refs``: as ``open_store`` says)."""
    app = get_app(ctx)

    async def with_store() -> Output:
        store = await open_store(app, migrate=migrate, create=create, refs=refs)
        try:
            return await fn(store)
        finally:
            await store.close()

    run_async(ctx, with_store)


def nothing_to_read(ctx: click.Context, data: Any, what: str) -> bool:
    """For a listing command (``ls``, ``search``, ``stats``) when its database does not exist:
    says so on stderr, naming the file (``what``: what there is not, "no threads"), prints
    ``data`` (the empty listing) under ``--json``, creates nothing, and returns True; False
    when there is a database to read."""
    app = get_app(ctx)
    missing = missing_database(app)
    if missing is None:
        return False
    sys.stderr.write(f"{what}: {no_database(missing)}\n")
    emit(app, Output(data))
    return True


async def _awaited(fn: Callable[[], Awaitable[Output]]) -> Output:
    return await fn()


# ----------------------------------------------------------------- click classes


def _json_after_command(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        get_app(ctx).json = True


class Command(click.Command):
    """A threadloom command. Besides its own options it accepts ``--json`` after its name too
    (``threadloom ls --json`` means ``threadloom --json ls``). With ``run_options`` (``run``,
    ``server``, ``thread``) the run options' flags (``run_flags``) join its own when click
    first asks for them: ``threadloom --help`` lists the command without importing the job
    model."""

    def __init__(self, *args: Any, run_options: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run_options = run_options
        self.params.append(
            click.Option(
                ["--json", "_json_after"],
                is_flag=True,
                hidden=True,
                expose_value=False,
                callback=_json_after_command,
                help="Same as the global --json.",
            )
        )

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if self.run_options:
            self.params[-1:-1] = run_flags(self.run_options)  # before the hidden --json
            self.run_options = ""
        return super().get_params(ctx)


def run_flags(door: str) -> list[click.Parameter]:
    """The run options (``jobs.RUN_OPTIONS``) as flags, typed and bounded by their ``JobSpec``
    fields: ``run``'s replace the job file's values (unset: None), ``server``'s (``threadloom
    mcp``) are the defaults of each client's job (a number's shown, a model's none),
    ``thread``'s (``resume``, ``fork``) this run's values (unset: None)."""
    from ..jobs import RUN_OPTIONS, JobSpec

    flags: list[click.Parameter] = []
    for o in RUN_OPTIONS:
        said = {"run": o.help, "server": o.server, "thread": o.thread}[door]
        if not said:
            continue
        field = JobSpec.model_fields[o.key]
        kinds = (field.annotation, *get_args(field.annotation))
        b = {k: getattr(m, k) for m in field.metadata for k in ("ge", "gt", "le") if hasattr(m, k)}
        typed: click.ParamType[Any] = (
            click.IntRange(b.get("ge"), b.get("le"))
            if int in kinds
            else click.FloatRange(b.get("gt"), b.get("le"), min_open="gt" in b)
            if float in kinds
            else click.STRING
        )
        default = field.default if door == "server" and typed is not click.STRING else None
        shown: dict[str, Any] = {"default": default, "show_default": default is not None}
        flags.append(
            click.Option([o.flag, o.key], type=typed, metavar=o.metavar, help=said, **shown)
        )
    return flags


def command(name: str, **attrs: Any) -> Callable[[Callable[..., Any]], Command]:
    """``@click.command`` for threadloom commands (help options and ``--json`` included)."""
    attrs.setdefault("context_settings", {"help_option_names": ["-h", "--help"]})
    return click.command(name, cls=Command, **attrs)


class ThreadloomGroup(click.Group):
    """Loads commands lazily from ``COMMANDS`` and is the one place errors become exit codes."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is None and cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name].split(":")
            cmd = getattr(importlib.import_module(module), attr)
            assert isinstance(cmd, click.Command)
            self.add_command(cmd, cmd_name)
        return cmd

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> NoReturn:
        argv = list(sys.argv[1:] if args is None else args)
        _CURRENT.set(None)
        _ARGV.set(argv)
        try:
            from ._fast import attempt  # ls/show/search/tree read-only, without SQLAlchemy

            fast = attempt(argv)  # None: not for the fast path, nothing written
            if fast is not None:
                sys.exit(fast)
            rv = super().main(argv, prog_name or PROG, complete_var, standalone_mode=False, **extra)
        except SystemExit:
            raise
        except BrokenPipeError:
            silence_stdout()
            sys.exit(0)
        except BaseException as exc:  # the one boundary: every error ends here
            sys.exit(report_error(exc, argv))
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


def _print_version(ctx: click.Context) -> None:
    """``--version``: ``threadloom, version X`` as click prints it, or with ``--json`` (before or
    after it) one JSON document, as every other output under ``--json``."""
    from importlib.metadata import version

    number = version("threadloom")
    if "--json" in _ARGV.get():
        click.echo(dumps({"name": PROG, "version": number}))
    else:
        click.echo(f"{PROG}, version {number}")
    ctx.exit(0)


def report_error(exc: BaseException, argv: Sequence[str] = ()) -> int:
    """Report ``exc`` as one line on stderr (and as JSON on stdout with ``--json``); return
    its exit code."""
    app = _CURRENT.get()
    json_mode = (app.json if app else False) or "--json" in argv
    verbose = (app.verbose if app else 0) or any(a in ("-v", "-vv", "--verbose") for a in argv)
    no_args = getattr(click.exceptions, "NoArgsIsHelpError", ())
    if isinstance(exc, no_args) and not json_mode:  # bare ``threadloom``: the help, exit 2
        sys.stdout.write(exc.format_message() + "\n")
        return EXIT_USAGE
    if isinstance(exc, click.Abort):  # click's wrapper around Ctrl-C
        code, message = EXIT_INTERRUPTED, "interrupted"
    elif isinstance(exc, no_args):
        code, message = EXIT_USAGE, f"no command given (see '{PROG} --help')"
    elif isinstance(exc, click.UsageError):
        code = EXIT_USAGE
        message = " ".join(exc.format_message().split()).rstrip(".")
        where = exc.ctx.command_path if exc.ctx is not None else PROG
        message = f"{message} (see '{where} --help')"
    elif isinstance(exc, click.ClickException):
        code, message = exc.exit_code, " ".join(exc.format_message().split())
    else:
        code, message = exit_code_for(exc), one_line(exc)
    message = visible(redact(message))  # an error may quote a title or a tool's output
    if verbose and not isinstance(exc, click.UsageError | click.Abort):
        sys.stderr.write(visible(redact("".join(traceback.format_exception(exc)))))
        message = message.removesuffix(" (run with -v for the traceback)")
    write_error(code, message, json_mode=json_mode, prog=PROG)
    return code


# ----------------------------------------------------------------- the group

_HELP = """Multi-task coding jobs on isolated, append-only agent threads.

\b
Refs: T-<id> names a thread; T-<id>#7 message 7; T-<id>#7-12 a range;
T-<id>#7- message 7 to the end. A unique start of the id (4+ characters,
T-01m9) or a unique end (T-…x2p4 or T-...x2p4) works anywhere a ref does.

\b
Exit codes: 0 ok · 1 ran but ended failed, interrupted, cancelled or over
budget · 2 bad usage or input · 3 unknown or ambiguous ref · 4 the model
provider failed · 130 Ctrl-C.

Global options go before the command; --json may also follow it.
"""


@click.group(
    cls=ThreadloomGroup,
    name=PROG,
    help=_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--db",
    "db",
    metavar="URL_OR_PATH",
    envvar="THREADLOOM_DB",
    # a URL with a password was taken out of the environment at start (workers._secrets)
    default=lambda: env_var("THREADLOOM_DB"),
    show_envvar=True,
    help="Database file or SQLAlchemy URL (postgresql+asyncpg://…). Default:"
    " .threadloom/threads.db under the current directory, created by the first command that"
    " writes (run, demo, import, migrate); reading commands never create it.",
)
@click.option(
    "--json",
    "json_output",
    is_flag=True,
    help="Machine-readable output: one JSON document on stdout (errors too).",
)
@click.option("-v", "--verbose", count=True, help="Log more to stderr (-v info, -vv debug).")
@click.option("--log-json", is_flag=True, help="Logs on stderr as JSON lines.")
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _param, value: _print_version(ctx) if value else None,
    help="Show the version and exit (with --json: {name, version}).",
)
@click.pass_context
def main(
    ctx: click.Context, db: str | None, json_output: bool, verbose: int, log_json: bool
) -> None:
    app = ctx.ensure_object(AppContext)
    app.db = db or None
    app.json = app.json or json_output
    app.verbose = verbose
    app.log_json = log_json
    _CURRENT.set(app)
