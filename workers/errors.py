"""Errors raised by the worker runtime.

    WorkerError
    ├── ModelSpecError          a model spec string that does not parse (bad input, exit 2)
    ├── ScriptError             the scripted model's file is bad, no rule matches, unknown task id
    ├── ModelError              the model provider failed; nothing above sees SDK exceptions
    │   ├── ProviderUnavailable     429/529/5xx/connection errors still failing after retries
    │   ├── SpendLimitReached       a 429 that says the account's spend limit is reached: no retry
    │   ├── ContextTooLong          "prompt is too long" / request_too_large: never retried
    │   ├── ProviderRejected        the provider refused the request (400/401/403/404)
    │   └── BadModelResponse        a response that is not what the protocol promises
    ├── ToolInputError          a tool call whose input does not validate (returned to the model)
    └── HandOffRefused          a thread's context is full and no successor can hold its state

Each provider translates its dependency's exceptions at its one boundary
(``raise ProviderUnavailable(...) from exc``).
"""

from __future__ import annotations


class WorkerError(Exception):
    pass


class ModelSpecError(WorkerError, ValueError):
    pass


class ScriptError(WorkerError):
    pass


class ModelError(WorkerError):
    """The provider failed. ``attempts`` counts the HTTP attempts made, retries included."""

    def __init__(self, message: str, *, attempts: int = 1, status_code: int | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.status_code = status_code


class ProviderUnavailable(ModelError):
    pass


class SpendLimitReached(ModelError):
    pass


class ContextTooLong(ModelError):
    pass


class ProviderRejected(ModelError):
    pass


class BadModelResponse(ModelError):
    pass


class ToolInputError(WorkerError, ValueError):
    pass


class HandOffRefused(WorkerError):
    """Raised by a ``hand_off`` hook: the thread cannot hand off (its successor's first message
    would not fit either); the run ends ``failed`` with this message."""
