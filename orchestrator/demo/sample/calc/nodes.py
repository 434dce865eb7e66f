"""The syntax tree: numbers, names, unary and binary operations."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Num:
    value: int | float


@dataclass(frozen=True)
class Name:
    id: str


@dataclass(frozen=True)
class UnaryOp:
    op: str  # "-" or "+"
    operand: Node


@dataclass(frozen=True)
class BinOp:
    op: str  # one of parser.BINARY_OPS
    left: Node
    right: Node


Node = Num | Name | UnaryOp | BinOp
