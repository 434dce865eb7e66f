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

Standard library only: ``threadloom --help`` and the error path import it cheaply.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
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
