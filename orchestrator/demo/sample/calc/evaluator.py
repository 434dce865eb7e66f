"""Syntax tree -> number."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping

from .errors import EvaluationError
from .nodes import BinOp, Name, Node, Num, UnaryOp

Number = int | float

_BINARY: dict[str, Callable[[Number, Number], Number]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "%": operator.mod,
    "**": operator.pow,
}


def evaluate(node: Node, env: Mapping[str, Number] | None = None) -> Number:
    """The value of ``node``; names are looked up in ``env``."""
    env = {} if env is None else env
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        try:
            return env[node.id]
        except KeyError:
            raise EvaluationError(f"unknown name {node.id!r}") from None
    if isinstance(node, UnaryOp):
        value = evaluate(node.operand, env)
        return -value if node.op == "-" else +value
    if isinstance(node, BinOp):
        return _apply(node.op, evaluate(node.left, env), evaluate(node.right, env))
    raise TypeError(f"not a calc syntax tree node: {node!r}")


def _apply(op: str, left: Number, right: Number) -> Number:
    if op == "/" and right == 0:
        raise EvaluationError("division by zero")
    if op == "**" and left == 0 and right < 0:
        raise EvaluationError("zero cannot be raised to a negative power")
    result = _BINARY[op](left, right)
    if isinstance(result, complex):  # e.g. (-8) ** 0.5
        raise EvaluationError(f"{left!r} {op} {right!r} is not a real number")
    return result
