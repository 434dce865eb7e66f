"""The one rule for drawing transcript text where a person reads it: the terminal (every
command's text output, ``cli._render.visible``), the web viewer's pages and the HTML export
(``web._text.shown``, the templates' ``finalize``) all call ``drawn``, so all three draw the
same characters the same way.

Text from the record (a tool's output, a model's message, a title) is shown, never obeyed or
hidden. ``drawn`` replaces with a visible, plain-ASCII picture every character that could
drive a terminal, reorder a line or hide text from the reader:

- C0 controls but newline and tab, a carriage return not ending a line, DEL: ``cat -v``'s
  pictures (ESC → ``^[``, NUL → ``^@``, a lone CR → ``^M``, DEL → ``^?``);
- C1 controls (``\\x9b`` is a one-byte CSI on some terminals): ``\\x9b``;
- the bidi controls, which reorder the text around them ("Trojan source"): U+061C, U+200E,
  U+200F, U+202A–U+202E, U+2066–U+2069: ``\\u202e``;
- the invisible characters that hide text or split a word without a trace: U+180E, U+200B,
  U+2060–U+2064, U+206A–U+206F, U+FEFF, U+FFF9–U+FFFB, and the Unicode tag characters
  U+E0000–U+E007F (which spell ASCII invisibly: prompt-injection text a reader never sees):
  ``\\u200b``, ``\\U000e0041``;
- a lone surrogate (a JSON ``\\ud800`` escape decoded into text), which no UTF-8 output can
  hold: ``\\ud800``.

Everything else is unchanged: printable text, newlines and tabs, and the joiners that scripts
and emoji need (U+200C, U+200D). Standard library only: the fast read path imports it.
"""

from __future__ import annotations

import re

DRAWN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
    "\u061c\u180e\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    "\ufeff\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f]"
    "|\r(?!\n)"
)
"""Every character ``drawn`` replaces (a CR only where it does not end a line)."""


def picture(char: str) -> str:
    """The visible spelling of one drawn character."""
    code = ord(char)
    if code < 0x20:
        return "^" + chr(code + 0x40)  # ESC → ^[, CR → ^M, BEL → ^G
    if code == 0x7F:
        return "^?"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def drawn(text: str) -> str:
    """``text`` with every character that could drive a terminal, reorder a line or hide text
    drawn visibly instead (``^[``, ``^M``, ``\\x9b``, ``\\u202e``, ``\\u200b``,
    ``\\U000e0041``). Newlines and tabs are kept; printable text is unchanged."""
    if text.isprintable():  # every drawn character is non-printable to Python: the fast path
        return text
    return DRAWN.sub(lambda m: picture(m.group()), text)
