"""The errors calc raises. Callers catch ``CalcError``; nothing else should escape."""

from __future__ import annotations


class CalcError(Exception):
    """Base class of every error raised for a bad expression."""


class PositionedError(CalcError):
    """An error at a known offset in the source text."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at position {pos}")
        self.pos = pos


class TokenizeError(PositionedError):
    """The text holds a character that starts no token."""


class ParseError(PositionedError):
    """The tokens do not form an expression."""


class EvaluationError(CalcError):
    """The expression is well formed but has no value (unknown name, division by zero, ...)."""
