"""Transcript text made safe and readable for a page: every string a template prints passes
through ``shown`` (the Jinja environment's ``finalize``) and is then HTML-escaped (autoescape).

Escaping stops markup; ``shown`` stops the rest. A page is not a terminal, so an escape
sequence cannot drive anything, but invisible characters still mislead a reader: a NUL, an
ESC or a lone CR would vanish, the bidi controls reorder the line around them ("Trojan
source"), and zero-width and tag characters hide text outright. ``shown`` is
``orchestrator.drawing.drawn``, the one rule the terminal draws by too: the page, the HTML
export and ``threadloom show`` draw the same characters the same way (ESC → ``^[``, a
zero-width space → ``\\u200b``, a tag character → ``\\U000e0041``; a lone surrogate, which
no response could encode, → ``\\ud800``). Newlines and tabs are kept.
"""

from __future__ import annotations

from ..drawing import drawn

shown = drawn
"""``drawing.drawn``: every printed string of every page and export passes through it."""


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
