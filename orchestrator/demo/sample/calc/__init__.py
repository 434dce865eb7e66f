"""calc: a tiny arithmetic expression language.

    >>> from calc import calculate
    >>> calculate("rate * hours + 2 ** 3", {"rate": 1.5, "hours": 8})
    20.0

The pipeline is ``tokenize`` (text -> tokens) -> ``parse`` (tokens -> syntax tree) ->
``evaluate`` (syntax tree -> number). Every error it raises is a ``CalcError``.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import CalcError, EvaluationError, ParseError, TokenizeError
from .evaluator import Number, evaluate
from .parser import parse
from .tokenizer import Token, tokenize

__all__ = [
    "CalcError",
    "EvaluationError",
    "Number",
    "ParseError",
    "Token",
    "TokenizeError",
    "calculate",
    "evaluate",
    "parse",
    "tokenize",
]


def calculate(text: str, env: Mapping[str, Number] | None = None) -> Number:
    """Evaluate the expression ``text``; names are looked up in ``env``."""
    return evaluate(parse(text), env)
