"""Transcript text made safe and readable for a page: every string a template prints passes
through ``shown`` (the Jinja environment's ``finalize``) and is then HTML-escaped (autoescape).

Escaping stops markup; ``shown`` stops the rest. A page is not a terminal, so an escape
sequence cannot drive anything, but invisible characters still mislead a reader: a NUL, an
ESC or a lone CR would vanish, and the bidi overrides reorder the line around them ("Trojan
source"). They are drawn as ``cat -v`` and ``threadloom show`` draw them (ESC → ``^[``, NUL →
``^@``, a lone CR → ``^M``, DEL → ``^?``; C1 controls and bidi overrides as ``\\x9b`` /
``\\u202e``): plain ASCII, legible in any font. A lone surrogate (a JSON ``\\ud800``
escape decoded into text) cannot be encoded as UTF-8 at all: it is shown as ``\\ud800``, so a
response never fails to encode. Newlines and tabs are kept.
"""

from __future__ import annotations

import re

# C0 controls but newline and tab (a CR is harmless only right before a newline), DEL, C1
# controls, bidi embeddings/overrides/isolates, and lone surrogates
_HIDDEN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]|\r(?!\n)"
)


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    if code <= 0x9F:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def shown(text: str) -> str:
    """``text`` with every invisible or line-reordering character drawn visibly, and every lone
    surrogate spelled out; printable text (newlines and tabs included) is unchanged."""
    if text.isprintable():
        return text
    return _HIDDEN.sub(_picture, text)


CAP_LINES = 40
CAP_CHARS = 6000


def cap(text: str, *, max_lines: int = CAP_LINES, max_chars: int = CAP_CHARS) -> tuple[str, str]:
    """(head, tail) of ``text`` within about ``max_lines`` lines and ``max_chars`` characters,
    the middle left out — or (text, "") when it fits. The page links to the whole text."""
    if len(text) <= max_chars and text.count("\n") < max_lines:
        return text, ""
    half_chars, half_lines = max_chars // 2, max_lines // 2
    head = text[:half_chars]
    cut = _nth(head, "\n", half_lines)
    head = head if cut < 0 else head[: cut + 1]
    tail = text[len(text) - half_chars :] if len(text) > half_chars else text
    cut = _nth_from_end(tail, "\n", half_lines)
    tail = tail if cut < 0 else tail[cut + 1 :]
    if len(head) + len(tail) >= len(text):
        return text, ""
    return head, tail


def _nth(text: str, sub: str, n: int) -> int:
    at = -1
    for _ in range(n):
        at = text.find(sub, at + 1)
        if at < 0:
            return -1
    return at


def _nth_from_end(text: str, sub: str, n: int) -> int:
    at = len(text)
    for _ in range(n):
        at = text.rfind(sub, 0, at)
        if at < 0:
            return -1
    return at
