"""Tokens -> syntax tree, by precedence climbing.

Grammar, loosest first: + - ; * / % ; unary - + ; ** (right-associative), so that
"-2 ** 2" is -(2 ** 2), as in Python.
"""

from __future__ import annotations

from .errors import ParseError
from .nodes import BinOp, Name, Node, Num, UnaryOp
from .tokenizer import EOF, LPAREN, NAME, NUMBER, OP, RPAREN, Token, tokenize

LEFT = "left"
RIGHT = "right"

# binding power and associativity of each binary operator: higher binds tighter
BINARY_OPS = {
    "+": (10, LEFT),
    "-": (10, LEFT),
    "*": (20, LEFT),
    "/": (20, LEFT),
    "%": (10, LEFT),
    "**": (30, RIGHT),
}
UNARY_POWER = 25  # tighter than * / %, looser than **
UNARY_OPS = ("-", "+")


def parse(text: str) -> Node:
    return Parser(tokenize(text)).parse()


class Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0

    def parse(self) -> Node:
        node = self.expression(0)
        tok = self.peek()
        if tok.kind != EOF:
            raise ParseError(f"unexpected {tok.value!r}", tok.pos)
        return node

    def peek(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind != EOF:
            self.i += 1
        return tok

    def expression(self, min_power: int) -> Node:
        left = self.unary()
        while True:
            tok = self.peek()
            if tok.kind != OP or tok.value not in BINARY_OPS:
                return left
            power, assoc = BINARY_OPS[tok.value]
            if power < min_power:
                return left
            self.advance()
            # a left-associative operator stops its right operand at its own level
            right = self.expression(power + 1 if assoc == LEFT else power)
            left = BinOp(tok.value, left, right)

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind == OP and tok.value in UNARY_OPS:
            self.advance()
            return UnaryOp(tok.value, self.expression(UNARY_POWER))
        return self.primary()

    def primary(self) -> Node:
        tok = self.advance()
        if tok.kind == NUMBER:
            return Num(float(tok.value) if "." in tok.value else int(tok.value))
        if tok.kind == NAME:
            return Name(tok.value)
        if tok.kind == LPAREN:
            node = self.expression(0)
            close = self.advance()
            if close.kind != RPAREN:
                raise ParseError("expected ')'", close.pos)
            return node
        if tok.kind == EOF:
            raise ParseError("unexpected end of input", tok.pos)
        raise ParseError(f"unexpected {tok.value!r}", tok.pos)
