"""How errors reach an MCP client: one line naming what and where, never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import ValidationError

from workers import redact

from ..errors import is_expected, one_line


def validation_line(exc: ValidationError) -> str:
    """At most five problems, each ``where: what``, on one line."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
        for e in exc.errors(include_url=False)[:5]
    )


@contextmanager
def refusals(*, resource: bool = False) -> Iterator[None]:
    """Expected errors (a bad ref, a bad argument, a refused operation) become the MCP error a
    client shows: one line naming what and where, never a traceback. Bugs go on up (the SDK
    reports them as an internal error and logs the traceback)."""
    try:
        yield
    except (ToolError, ResourceError):
        raise
    except Exception as exc:
        if isinstance(exc, ValidationError):
            message = validation_line(exc)
        elif is_expected(exc) or isinstance(exc, ValueError):
            message = one_line(exc) if is_expected(exc) else redact(" ".join(str(exc).split()))
        else:
            raise
        raise (ResourceError(message) if resource else ToolError(message)) from exc
