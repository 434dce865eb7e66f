"""``store.redact`` over a stream, in bounded memory: ``export --redact`` of a transcript whose
tool outputs run to hundreds of megabytes.

``RedactingWriter(write)`` takes text in pieces of any size and writes it redacted, a piece at
a time, exactly as ``redact`` would mask the whole text at once. It holds back a tail of what
it was given and cuts only where no secret can straddle the cut:

- every secret-looking token (``sk-…``, ``AKIA…``, ``ghp_…``) is a run of ``[A-Za-z0-9_-/+=]``:
  a cut right after a character outside that class (and not a backslash, which in JSON begins
  an escape a token may follow: ``\nsk-…``) never splits one;
- a configured secret value (any characters) or an ``aws_secret_access_key = …`` assignment is
  never cut: the held tail is longer than either can be, and a cut inside one found in the
  buffer moves before it;
- a PEM private-key block is held whole until its END line (up to ``PEM_MAX`` characters after
  its BEGIN line; a BEGIN with no END that far is no key the whole-text pass would mask either,
  short of a pathological input).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from store import redact
from store._redact import configured_secrets

PIECE = 1 << 20
"""Characters read and written at a time."""
HOLD = 4096
"""Characters held back beyond the longest configured secret."""
PEM_MAX = 1 << 20

_TOKEN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-/+=")
_AWS = re.compile(r"(?i)aws_secret_access_key[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/+=]{0,40}")
_PEM = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----", re.DOTALL
)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")


class RedactingWriter:
    """``write(piece)`` and, at the end, ``close()``: ``sink`` receives the redacted text."""

    def __init__(self, sink: Callable[[str], object]) -> None:
        self.sink = sink
        self.buf = ""
        self.secrets = configured_secrets()
        self.hold = HOLD + max((len(v) for v in self.secrets), default=0)
        self.swallow = False  # the text goes on with a masked token cut at the last piece

    def write(self, text: str) -> None:
        if self.swallow:
            rest = _RUN.match(text)
            text = text[rest.end() if rest else 0 :]
            self.swallow = not text  # all of it the token's: it may go on in the next piece
        self.buf += text
        if len(self.buf) >= 2 * PIECE + self.hold:
            cut, forced = self._cut()
            out = redact(self.buf[:cut])
            self.sink(out)
            self.buf = self.buf[cut:]
            if forced and _MASKED_AT_END.search(out) is not None:
                # a token masked up to a forced cut: the rest of its run is masked with it
                rest = _RUN.match(self.buf)
                self.buf = self.buf[rest.end() if rest else 0 :]
                self.swallow = not self.buf

    def close(self) -> None:
        if self.buf:
            self.sink(redact(self.buf))
        self.buf = ""

    def _cut(self) -> tuple[int, bool]:
        """The largest safe cut at most ``len(buf) - hold`` (and not before ``PIECE``), and
        whether it is forced: inside a run of token characters longer than a piece."""
        buf = self.buf
        limit = len(buf) - self.hold
        spans = [m.span() for m in _AWS.finditer(buf)]
        spans += [m.span() for m in _PEM.finditer(buf)]
        for value in self.secrets:
            start = buf.find(value)
            while start >= 0:
                spans.append((start, start + len(value)))
                start = buf.find(value, start + 1)
        for m in _PEM_BEGIN.finditer(buf):
            whole = any(a <= m.start() < b for a, b in spans)
            if not whole and len(buf) - m.start() < PEM_MAX and m.start() >= PIECE:
                limit = min(limit, m.start())  # a key whose END has not come yet: held
                break
        p = limit
        while p >= PIECE:
            sep = _LAST_SEPARATOR.match(buf, PIECE - 1, p)
            if sep is None:
                break
            p = sep.end()
            inside = next((a for a, b in spans if a < p < b), None)
            if inside is None:
                return p, False
            p = inside
        return limit, True


_RUN = re.compile(r"[A-Za-z0-9_\-/+=]+")
_LAST_SEPARATOR = re.compile(r"(?s).*[^A-Za-z0-9_\-/+=\\]")
# (never right after a backslash: in JSON it begins an escape — ``\n`` — after which a token
# may start, ``store._redact._START``; the escape and the token stay in one piece)
_MASKED_AT_END = re.compile(r"\[REDACTED\]\Z")
