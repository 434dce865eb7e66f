"""The fast front of ``ls``, ``show``, ``search`` and ``tree``: the same output, without
importing SQLAlchemy, pydantic or structlog.

``attempt(argv)`` runs a command line on the read-only path (``store.rawread``) when it can
answer it exactly as the full path would, and returns its exit code; otherwise it returns None
having written nothing, and the full path (click, the async store) runs the command as always.
It is taken when all of these hold:

- the command is ``ls``, ``show``, ``search`` or ``tree`` with only options it knows
  (``--db``, ``--json``; ``ls --job/--status/--kind/--limit``; ``show --tools/--redact``;
  ``search --job/--limit``), each well formed — anything else (``--help``, ``-v``,
  ``--log-json``, ``show --raw``, a bad value, an empty query) is left to click, which
  reports it;
- the database is a SQLite file that exists, is writable (as the full path needs it) and is
  at the newest schema revision — a missing file, a URL (PostgreSQL), an old schema go the
  full way, which creates or migrates.

It reads through the store's own statements and models (``store.rawread``), so a stored value
means the same on both paths.

Both paths render through the same builders (``_read_views``), so text, ``--json`` and errors
(bad ref: exit 2; unknown or ambiguous: exit 3, with the candidates) are byte-identical;
``tests/orchestrator/test_fast_read.py`` runs both on one database and compares them.

Two entries: the ``threadloom`` command itself (``_entry.main``, the console script and
``python -m orchestrator``) calls ``run_standalone`` before click is imported (click and the CLI
module cost ~25 ms of a ~100 ms budget); in-process callers (``CliRunner``, an embedding
program) reach ``attempt`` from ``ThreadloomGroup.main``. Both write through ``_emit`` —
``cli.emit`` for the cases met here, without click (so this module never imports ``_app``,
which imports it) — and the standalone entry reports errors through ``_report``, the same for
``cli.report_error``.

``THREADLOOM_NO_FAST=1`` turns the fast path off (the full path runs every command).
``THREADLOOM_FAST_TRACE=FILE`` appends one JSON line per command to FILE: whether the fast
path was taken (or why not) and which heavy modules were loaded — for tests and for
measuring, never for users.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

    from ._read_views import View
    from ._thread_text import Mode

COMMANDS = ("ls", "show", "search", "tree")
HEAVY_MODULES = ("sqlalchemy", "pydantic", "structlog", "aiosqlite", "alembic", "rich", "click")
"""Modules the fast path must not load (``rich`` only on a terminal; ``click`` when run as
``threadloom``: ``early`` answers before it is imported)."""

_STATUSES = ("idle", "queued", "running", "done", "failed", "interrupted", "cancelled")
_KINDS = ("lead", "worker", "reader")
_SEARCH_LIMIT = 20


@dataclass
class Args:
    """A command line the fast path understands."""

    command: str
    db: str | None = None
    json: bool = False
    positional: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)


# the options each command takes a value for, and its flags (``--json`` is everyone's)
_VALUES = {"ls": ("--job", "--status", "--kind", "--limit"), "search": ("--job", "--limit")}
_FLAGS = {"show": ("--tools", "--redact")}
_POSITIONAL = {"ls": 0, "show": 1, "search": 1, "tree": 1}


def parse(argv: Sequence[str]) -> Args | None:
    """``argv`` as the fast path reads it, or None for anything it leaves to click."""
    args = list(argv)
    db: str | None = None
    as_json = False
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt == "--json":
            as_json = True
        elif opt == "--db" and args and not args[0].startswith("-"):
            db = args.pop(0)
        elif opt.startswith("--db="):
            db = opt[len("--db=") :]
        else:
            return None
    if not args or args[0] not in COMMANDS:
        return None
    out = Args(args.pop(0), db=db, json=as_json)
    values, flags = _VALUES.get(out.command, ()), _FLAGS.get(out.command, ())
    while args:
        arg = args.pop(0)
        name, eq, inline = arg.partition("=")
        if arg == "--json":
            out.json = True
        elif arg in flags:
            out.flags.add(arg)
        elif name in values and eq:
            out.options[name] = inline
        elif arg in values and args and not args[0].startswith("-"):
            out.options[arg] = args.pop(0)
        elif arg.startswith("-"):  # --help, --raw, an unknown option, "--", "-": click's
            return None
        else:
            out.positional.append(arg)
    if len(out.positional) != _POSITIONAL[out.command]:
        return None
    return out if _valid(out) else None


def _valid(args: Args) -> bool:
    opts = args.options
    if opts.get("--status", "idle") not in _STATUSES or opts.get("--kind", "lead") not in _KINDS:
        return False
    limit = opts.get("--limit", "1")
    if not (limit.isascii() and limit.isdigit()) or len(limit) > 18:
        return False
    if args.command == "search":
        return int(limit) >= 1 and bool(args.positional[0].split())
    return True


def database(db: str | None) -> Path | None:
    """The SQLite file ``--db`` names (``THREADLOOM_DB``; default ``.threadloom/threads.db``)
    if the fast path can read it as the full path would: an existing, writable regular file."""
    if db is None:
        from workers import env_var  # it may hold a password: taken at start

        db = env_var("THREADLOOM_DB") or None
    if db is None:
        path = Path.cwd() / ".threadloom" / "threads.db"
    elif "://" in db:
        return None  # a URL: PostgreSQL, or sqlite:/// spelled out — the full path's
    else:
        path = Path(db).expanduser().resolve()
    try:
        ok = path.is_file() and os.access(path, os.R_OK | os.W_OK)
    except OSError:
        return None
    return path if ok and os.access(path.parent, os.W_OK) else None


# ----------------------------------------------------------------- running


_ATTEMPTED = False  # the early attempt declined: the one in ThreadloomGroup.main need not retry


def run_standalone(argv: Sequence[str]) -> int | None:
    """Run ``argv`` in the ``threadloom`` process itself (``_entry.main``), before click is
    imported: the exit code, or None when the full path must run it (then ``attempt`` declines
    at once in ``ThreadloomGroup.main``, so nothing is tried twice)."""
    global _ATTEMPTED
    _ATTEMPTED = True
    try:
        return attempt(argv, standalone=True)
    except Exception as exc:  # a store error: a bad, unknown or ambiguous ref
        return _report(exc, json_mode="--json" in argv)
    except KeyboardInterrupt as exc:
        return _report(exc, json_mode="--json" in argv)


def attempt(argv: Sequence[str], *, standalone: bool = False) -> int | None:
    """Run ``argv`` on the fast path and return its exit code, or None (nothing written) when
    the full path must run it. Store errors (bad, unknown or ambiguous refs) propagate, to be
    reported by the caller as the full path reports them. ``standalone``: the call from
    ``run_standalone`` (after which the one in ``ThreadloomGroup.main`` declines at once)."""
    if _ATTEMPTED and not standalone:
        return None
    if os.environ.get("THREADLOOM_NO_FAST", "") not in ("", "0"):
        return _declined("THREADLOOM_NO_FAST")
    args = parse(argv)
    if args is None:
        return _declined("arguments")
    path = database(args.db)
    if path is None:
        return _declined("database")
    from store.rawread import Unsupported, open_at_head

    try:
        conn = open_at_head(path)
    except Unsupported as err:
        return _declined(str(err))
    from store.errors import StoreError

    try:
        view = _view(conn, args, path)
    except StoreError:  # a bad, unknown or ambiguous ref: reported as the full path does
        _trace(taken=True)
        raise
    except Exception as err:  # Unsupported, sqlite3.Error, or a bug here: the full path's
        return _declined(f"{type(err).__name__}: {err}")
    finally:
        conn.close()
    _trace(taken=True)
    return _emit(view, as_json=args.json)


# ``cli.emit`` and ``cli.report_error`` for the cases the fast path meets, without click (the
# parity tests run the fast side through these and hold them to the full path's bytes)


def _emit(view: View, *, as_json: bool) -> int:

    from workers import redact_data

    from ._render import Printer, dumps, silence_stdout, write_redacted

    stdout = sys.stdout
    try:
        if as_json:
            stdout.write(dumps(redact_data(view.data) if view.redact else view.data) + "\n")
        elif not view.redact:
            view.text(Printer(stdout, verbatim=view.verbatim))
        else:
            write_redacted(view.text, stdout, verbatim=view.verbatim)
        stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    except OSError as err:
        from ..errors import EXIT_FAILED, CliError

        return _report(
            CliError(f"cannot write the output: {err.strerror or err}", EXIT_FAILED),
            json_mode=as_json,
        )
    return 0


def _report(exc: BaseException, *, json_mode: bool) -> int:
    from workers import redact

    from ..errors import exit_code_for, one_line
    from ._render import visible, write_error

    code, message = exit_code_for(exc), visible(redact(one_line(exc)))
    write_error(code, message, json_mode=json_mode)
    return code


def _view(conn: sqlite3.Connection, args: Args, path: Path) -> View:
    """The command's ``View`` from the raw reader, through the shapes ``orchestrator.api``
    builds from the store (``orchestrator.views``) and the same text builders."""
    from store import rawread as raw
    from store.models import Usage

    from .. import views as shapes
    from . import _read_views as views

    opts = args.options
    if args.command == "ls":
        job = raw.job_of(conn, opts["--job"]).id if "--job" in opts else None
        limit = int(opts.get("--limit", shapes.LS_LIMIT))
        rows = raw.list_threads(
            conn,
            job_id=job,
            status=opts.get("--status"),
            kind=opts.get("--kind"),
            limit=limit + 1 if limit else None,
        )
        more = bool(limit) and len(rows) > limit
        listed = rows[:limit] if limit else rows
        shown = [shapes.thread_json(t) for t in listed]
        found = raw.short_refs(conn, [t.id for t in listed]) if views.on_terminal() else None
        short = {f"T-{i}": ref for i, ref in found.items()} if found is not None else None
        # the store names a SQLite file by its resolved path (``Database.display``)
        return views.ls_view(
            shown, limit=limit, more=more, database=str(path.resolve()), short=short
        )
    if args.command == "show":
        info, start, end = raw.resolve(conn, args.positional[0])
        first = start or 1
        sums = raw.usage_totals(conn, thread_id=info.id)
        view = shapes.ThreadView(
            info,
            raw.messages(conn, info.id, start=first, end=end),
            usage=sums[0].usage if sums else Usage(),
            cost=sums[0].cost_usd if sums else 0.0,
            start=start,
            end=end,
            before=raw.message(conn, info.id, first - 1) if first > 1 else None,
        )
        mode: Mode = "tools" if "--tools" in args.flags else "brief"
        return views.show_view(view, mode=mode, redact="--redact" in args.flags)
    if args.command == "tree":
        focus = raw.resolve(conn, args.positional[0])[0]
        threads = raw.job_tree(conn, focus.job_id)
        totals = {t.thread_id: t for t in raw.usage_totals(conn, job_id=focus.job_id)}
        return views.tree_view(shapes.tree_json(focus, threads, totals, empty=Usage()))
    query = args.positional[0]
    job = raw.job_of(conn, opts["--job"]).id if "--job" in opts else None
    hits = raw.search(conn, query, job_id=job, limit=int(opts.get("--limit", _SEARCH_LIMIT)))
    return views.search_view(query, hits)


def _declined(reason: str) -> int | None:
    _trace(taken=False, reason=reason)
    return None


def _trace(*, taken: bool, reason: str | None = None) -> None:
    where = os.environ.get("THREADLOOM_FAST_TRACE")
    if not where:
        return
    import json

    heavy = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY_MODULES)
    line = {"taken": taken, "reason": reason, "heavy_modules": heavy, "argv": sys.argv[1:]}
    with open(where, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
