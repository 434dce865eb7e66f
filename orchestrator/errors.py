"""The orchestrator's errors, and how every error — ours, the store's, the workers' — becomes an
exit code.

The orchestrator's own error tree; each class carries its exit code (``exit_code``)::

    OrchestratorError              exit 1
    ├── CliError                   exit 2, or the code it is given (the command line's own)
    ├── UsageError                 exit 2: a request refused as asked, below the command line
    ├── JobFileError (ValueError)  exit 2: a job file that cannot be run (``jobs``)
    ├── ReadError (ValueError)     exit 2: a page that cannot be read as asked (``runtime.pages``)
    ├── DispatchError (ValueError) exit 2: tasks a dispatch refuses (an id the job used already)
    ├── ModelRefused (ValueError)  exit 2: a model a caller may not have built (``model_policy``)
    ├── LedgerTooLarge (ValueError) exit 2: a lead_context_tokens too small for the job's ledger
    └── WorktreeError              exit 1: git itself failed (``isolation``)
        └── RepoStateError         exit 2: the repository cannot be isolated as asked

SPEC §Command line: ``0`` success; ``1`` the job or thread ran but ended failed, interrupted,
cancelled or over budget (and any error nobody foresaw); ``2`` bad usage or bad input; ``3`` not
found or ambiguous ref; ``4`` the model provider failed after retries; ``130`` Ctrl-C.

An exception's code is found by walking its class's MRO through ``EXIT_CODES`` (keyed by
``module.QualName``, so no module is imported just to be compared against: the table names
``workers.errors.ModelError`` without pulling the worker runtime into ``threadloom ls``). An
exception class may instead carry an integer ``exit_code`` attribute (as ``CliError`` and click's
exceptions do); that wins. New error types join by adding a line here or by setting
``exit_code`` on the class. This module imports nothing of the package: every layer may raise
its errors.
"""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_FOUND: Final = 3
EXIT_PROVIDER: Final = 4
EXIT_INTERRUPTED: Final = 130

EXIT_CODES: Final[dict[str, int]] = {
    "builtins.KeyboardInterrupt": EXIT_INTERRUPTED,
    "asyncio.exceptions.CancelledError": EXIT_INTERRUPTED,
    # store (SPEC: bad ref syntax, bad input, refused operations → 2; unknown/ambiguous → 3)
    "store.errors.RefSyntaxError": EXIT_USAGE,
    "store.errors.ThreadNotFound": EXIT_NOT_FOUND,
    "store.errors.AmbiguousRef": EXIT_NOT_FOUND,
    "store.errors.ImportFormatError": EXIT_USAGE,
    "store.errors.SearchQueryError": EXIT_USAGE,
    "store.errors.InvariantError": EXIT_USAGE,  # ForkPointError included
    "store.errors.StatusError": EXIT_USAGE,
    "store.errors.LeaseHeld": EXIT_USAGE,
    "store.errors.DatabaseUnavailable": EXIT_USAGE,  # a --db that cannot be opened
    "store.errors.DatabaseError": EXIT_FAILED,
    "store.errors.ConcurrencyError": EXIT_FAILED,
    "store.errors.RefError": EXIT_NOT_FOUND,  # the base of the ref errors: not found unless told
    "store.errors.StoreError": EXIT_FAILED,  # the base: a store failure nobody narrowed
    # the worker runtime
    "workers.errors.ModelSpecError": EXIT_USAGE,
    "workers.errors.ScriptError": EXIT_USAGE,
    "workers.errors.ModelError": EXIT_PROVIDER,
    "workers.errors.ToolInputError": EXIT_USAGE,
    "workers.errors.WorkerError": EXIT_FAILED,  # the base: the worker runtime failed
    "workers.tools._sandbox.SandboxUnavailable": EXIT_USAGE,
    # the orchestrator's own errors carry their code (``exit_code``, below)
}


class OrchestratorError(Exception):
    """The root of the orchestrator's errors."""

    exit_code: int = EXIT_FAILED


class CliError(OrchestratorError):
    """A one-line error raised by a command itself: bad flag combinations, unreadable files…"""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UsageError(OrchestratorError):
    """A request refused in one line before anything is done, by the layers below the command
    line (``api``, ``runtime``, the MCP server, ``exposure``, ``model_policy``): an empty
    message, a value a flag or a parameter cannot take, something the request needs that is
    not there (an SDK, a shared database, a reachable cluster, an address to bind). ``CliError``
    is the command line's own."""

    exit_code = EXIT_USAGE


class JobFileError(OrchestratorError, ValueError):
    """A job file that cannot be run; the message is one line naming file, line and key."""

    exit_code = EXIT_USAGE


class ReadError(OrchestratorError, ValueError):
    """A page of a thread that cannot be read as asked (a bad mode, pattern or page ref)."""

    exit_code = EXIT_USAGE


class DispatchError(OrchestratorError, ValueError):
    """Tasks a dispatch refuses before any worker is stored (a task id used twice in the
    call, or already used in the job)."""

    exit_code = EXIT_USAGE


class ModelRefused(OrchestratorError, ValueError):
    """A model a caller asked for that it may not have built: one whose key would go to an
    endpoint the server was not configured for, or a scripted model a client chose."""

    exit_code = EXIT_USAGE


class LedgerTooLarge(OrchestratorError, ValueError):
    """The job's ledger does not fit its budget (half of ``lead_context_tokens``) even with
    every task in one line (``runtime.ledger``): ``needed`` tokens, and ``minimum``, the
    smallest ``lead_context_tokens`` that works."""

    exit_code = EXIT_USAGE

    def __init__(self, needed: int, *, budget: int, tasks: int, minimum: int) -> None:
        super().__init__(
            f"lead_context_tokens must be at least {minimum:,} for this job: its ledger needs"
            f" {needed:,} tokens with each of its {tasks:,} tasks in one line, and must fit in"
            f" half of lead_context_tokens (here {budget:,}) beside the lead's system prompt"
            " and tools"
        )
        self.needed, self.budget, self.tasks, self.minimum = needed, budget, tasks, minimum


class WorktreeError(OrchestratorError):
    """A git operation of worktree isolation failed."""

    exit_code = EXIT_FAILED


class RepoStateError(WorktreeError):
    """The user's repository cannot be isolated as asked (not a repository, a merge in
    progress, a branch checked out elsewhere …); the message says why and what to do."""

    exit_code = EXIT_USAGE


def exit_code_for(exc: BaseException) -> int:
    """The exit code SPEC §Command line gives ``exc``."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    for cls in type(exc).__mro__:
        found = EXIT_CODES.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            return found
    return EXIT_FAILED


def is_expected(exc: BaseException) -> bool:
    """Whether ``exc`` is an error the user caused or the world did (reported as one line),
    rather than a bug (reported with a hint to rerun with ``-v`` for the traceback)."""
    if isinstance(exc, CliError):
        return True
    if isinstance(getattr(exc, "exit_code", None), int):
        return True
    return any(f"{c.__module__}.{c.__qualname__}" in EXIT_CODES for c in type(exc).__mro__)


def one_line(exc: BaseException) -> str:
    """The error's message on one line (what is wrong and where), secrets redacted."""
    from workers import redact

    if exit_code_for(exc) == EXIT_INTERRUPTED:
        return "interrupted"
    text = redact(" ".join(str(exc).split()))
    if not is_expected(exc):
        detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        return f"internal error: {detail} (run with -v for the traceback)"
    return text or type(exc).__name__
