"""Source text -> a list of tokens, ending with an EOF token."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import TokenizeError

NUMBER = "NUMBER"
NAME = "NAME"
OP = "OP"
LPAREN = "LPAREN"
RPAREN = "RPAREN"
EOF = "EOF"

# longest first, so "**" is never read as two "*"
OPERATORS = ("**", "+", "-", "*", "/", "%")


@dataclass(frozen=True)
class Token:
    kind: str
    value: str
    pos: int  # offset of the token's first character in the source text

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.value!r}, {self.pos})"


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit():
            end = _scan_number(text, i)
            tokens.append(Token(NUMBER, text[i:end], i))
            i = end
        elif ch.isalpha() or ch == "_":
            end = i + 1
            while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                end += 1
            tokens.append(Token(NAME, text[i:end], i))
            i = end
        elif ch in "()":
            tokens.append(Token(LPAREN if ch == "(" else RPAREN, ch, i))
            i += 1
        else:
            op = next((op for op in OPERATORS if text.startswith(op, i)), None)
            if op is None:
                raise TokenizeError(f"unexpected character {ch!r}", i)
            tokens.append(Token(OP, op, i))
            i += len(op)
    tokens.append(Token(EOF, "", len(text)))
    return tokens


def _scan_number(text: str, start: int) -> int:
    """The end offset of the number that starts at ``start``: digits, then optionally a "."
    followed by at least one digit. "3." is the number 3 followed by a stray "."."""
    end = start
    while end < len(text) and text[end].isdigit():
        end += 1
    # a "." belongs to the number only when a digit follows it
    if end + 1 < len(text) - 1 and text[end] == "." and text[end + 1].isdigit():
        end += 1
        while end < len(text) and text[end].isdigit():
            end += 1
    return end
