"""Secret redaction: the one step applied to everything threadloom writes to its logs, to the
terminal and to exception text (and, on request, to ``show --redact`` / ``export --redact``).

Two kinds of secret are masked:

- configured values: the values of ``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY`` and
  ``ANTHROPIC_AUTH_TOKEN``, and of every environment variable whose name contains KEY, SECRET,
  TOKEN or PASSWORD and whose value is at least 8 characters, read from the environment — and
  from the secrets taken out of it at start (``_secrets``) — the first time they are needed
  (``refresh_secrets()`` re-reads them) — replaced by ``[REDACTED]``;
- values that look like common secret formats wherever they appear: Anthropic (``sk-ant-…``) and
  OpenAI (``sk-…``, ``sk-proj-…``) keys, AWS access key ids (``AKIA…``) and the 40-character
  secret after ``aws_secret_access_key``, GitHub tokens (``ghp_ gho_ ghu_ ghs_ ghr_
  github_pat_``), PEM private-key blocks — replaced by their recognisable prefix and
  ``…[REDACTED]`` (``sk-ant-…[REDACTED]``), so a reader still knows what kind of secret it was.

``RedactingWriter`` (and ``redacted``, its form for an async stream of pieces) is ``redact``
over a stream, in bounded memory: every reader that streams text out of the store — the HTML,
Markdown and JSONL exports, ``show --raw``'s outputs stored apart (``Store.output_pieces``
through ``redacted``) — masks through it, so a secret cut by a stored output's chunk boundary is
masked whole, exactly as ``redact`` masks the whole text. It masks text, not an encoding of
it: a reader redacts before it escapes (HTML, JSON), or a secret holding ``&``, ``<`` or ``"``
would be spelled apart and pass.

Standard library only: ``threadloom --help`` and the error path import it cheaply.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from typing import Any

from ._secrets import MIN_SECRET_CHARS, secret_name, taken_secrets

MASK = "[REDACTED]"

_START = r"(?:(?<!\w)|(?<=\\[nrtbf])|(?<=\\u[0-9A-Fa-f]{4}))"
"""Where a token may start: not after a word character — or after a JSON escape (``\\n``,
``\\u2028``), whose last character is one, so that a token is found in a JSON text as in the
text it encodes (``export --redact`` masks the JSON it writes)."""

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----", re.DOTALL
        ),
        r"-----BEGIN \1PRIVATE KEY-----…[REDACTED]…-----END \1PRIVATE KEY-----",
    ),
    (re.compile(_START + r"sk-ant-[A-Za-z0-9_\-]{8,}"), "sk-ant-…" + MASK),
    (re.compile(_START + r"sk-proj-[A-Za-z0-9_\-]{8,}"), "sk-proj-…" + MASK),
    (re.compile(_START + r"sk-(?!ant-|proj-)[A-Za-z0-9_\-]{16,}"), "sk-…" + MASK),
    (re.compile(_START + r"(AKIA|ASIA)[0-9A-Z]{16}\b"), r"\1…" + MASK),
    (
        re.compile(
            r"(?i)(aws_secret_access_key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])"
        ),
        r"\1" + MASK,
    ),
    (re.compile(_START + r"(gh[pousr]_)[A-Za-z0-9]{20,}"), r"\1…" + MASK),
    (re.compile(_START + r"github_pat_[A-Za-z0-9_]{20,}"), "github_pat_…" + MASK),
)

_configured: tuple[str, ...] | None = None


def configured_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The secret values named by ``environ`` (default: the process environment with the
    secrets taken from it at start), longest first (so a value that contains another is masked
    whole)."""
    env = {**taken_secrets(), **os.environ} if environ is None else environ
    found = {
        value
        for name, value in env.items()
        if secret_name(name) and len(value.strip()) >= MIN_SECRET_CHARS
    }
    return tuple(sorted(found, key=len, reverse=True))


def refresh_secrets(environ: Mapping[str, str] | None = None) -> None:
    """Re-read the configured secrets (from ``environ``, default the process environment and
    the secrets taken from it at start)."""
    global _configured
    _configured = configured_secrets(environ)


def redact(text: str) -> str:
    """``text`` with every configured secret and secret-looking value masked."""
    if _configured is None:
        refresh_secrets()
    assert _configured is not None
    for value in _configured:
        if value in text:
            text = text.replace(value, MASK)
    if not _may_hold_pattern(text):
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _may_hold_pattern(text: str) -> bool:
    # a cheap pre-check: logs are written often and almost never hold a secret
    return any(marker in text for marker in _MARKERS)


_MARKERS = ("sk-", "AKIA", "ASIA", "gh", "github_pat_", "PRIVATE KEY", "ws_secret", "WS_SECRET")


def redact_data(value: Any) -> Any:
    """``redact`` applied to every string inside a JSON-like value (dicts, lists, tuples); keys
    are kept. Returns a new value; the input is not changed."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: redact_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v) for v in value]
    return value


# ----------------------------------------------------------------- over a stream
#
# ``RedactingWriter(write)`` takes text in pieces of any size and writes it redacted, a piece
# at a time, exactly as ``redact`` would mask the whole text at once. It holds back a tail of
# what it was given and cuts only where no secret can straddle the cut:
#
# - every secret-looking token (``sk-…``, ``AKIA…``, ``ghp_…``) is a run of
#   ``[A-Za-z0-9_-/+=]``: a cut right after a character outside that class (and not a
#   backslash, which in JSON begins an escape a token may follow: ``\nsk-…``) never splits one;
# - a configured secret value (any characters) or an ``aws_secret_access_key = …`` assignment
#   is never cut: the held tail is longer than either can be, and a cut inside one found in
#   the buffer moves before it;
# - a PEM private-key block is held whole until its END line (up to ``PEM_MAX`` characters
#   after its BEGIN line; a BEGIN with no END that far is no key the whole-text pass would
#   mask either, short of a pathological input).

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
        if _configured is None:
            refresh_secrets()
        assert _configured is not None
        self.secrets = _configured
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
# may start, ``workers._redact._START``; the escape and the token stay in one piece)
_MASKED_AT_END = re.compile(r"\[REDACTED\]\Z")


async def redacted(pieces: AsyncIterable[str]) -> AsyncIterator[str]:
    """``pieces`` redacted as one text (``RedactingWriter``): yields masked pieces, cut where no
    secret can straddle a cut, whatever the input's piece boundaries."""
    out: list[str] = []
    sink = RedactingWriter(out.append)
    async for piece in pieces:
        sink.write(piece)
        while out:
            yield out.pop(0)
    sink.close()
    for piece in out:
        yield piece
