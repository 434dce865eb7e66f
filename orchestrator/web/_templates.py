"""The one Jinja environment of the viewer and the export.

Autoescape is on for every template, and ``finalize`` passes every printed string through
``shown`` first, so no template can print transcript text unescaped or with its invisible
characters hidden: safety does not depend on each template remembering a filter. The
environment is async so the export can stream whole tool outputs out of the store while the
page renders (bounded memory), with the very templates the server uses.
"""

from __future__ import annotations

from functools import cache, partial
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from workers import redact

from ..humanize import age, compact, count, timestamp as stamp
from ..views import VERDICT_MARKS, snippet_parts
from ._markdown import markdown
from ._text import shown
from ._views import PAGE, SERVER, usage_line

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

STATUSES = ("idle", "queued", "running", "done", "failed", "interrupted", "cancelled")
KINDS = ("lead", "worker", "reader")


def _finalize(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, str) and not isinstance(value, Markup):
        return shown(value)
    return value


def _finalize_redacted(value: Any) -> Any:
    """``_finalize`` after masking secrets: on the text itself, before it is escaped, so a
    secret holding ``<`` or ``&`` is found as it is (the escaped page would spell it apart)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return shown(redact(value))
    return _finalize(value)


@cache
def environment(*, redacted: bool = False, streaming: bool = True) -> jinja2.Environment:
    """The templates' environment; ``redacted``: every printed string has its secrets masked
    (``export --format html --redact``); ``streaming``: async, so a page can stream a whole
    output from the store as it renders (the export). The server's pages hold nothing to
    stream and render with the same templates synchronously: Jinja's async mode awaits every
    call of every macro, which cost a 200-message page half its time."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        enable_async=streaming,
        finalize=_finalize_redacted if redacted else _finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.globals.update(
        PAGE=PAGE,
        STATUSES=STATUSES,
        KINDS=KINDS,
        age=age,
        compact=compact,
        count=count,
        snippet_parts=snippet_parts,
        stamp=stamp,
        links=SERVER,
        markdown=partial(markdown, redacted=redacted),
        usage_line=usage_line,
        claims_of=claims_of,
        VERDICT_MARKS=VERDICT_MARKS,
        standalone=False,
    )
    return env


def claims_of(result: Any, kind: str, index: int | None = None) -> list[Any]:
    """The check's claims about one item of a result (``kind`` and its ``index``), or every
    claim of a kind (``index`` None: the status claims); none for a result never checked."""
    check = getattr(result, "check", None)
    if check is None:
        return []
    return [c for c in check.claims if c.kind == kind and (index is None or c.index == index)]


def stylesheet() -> Markup:
    """The stylesheet, for inlining in a self-contained page (our file: trusted markup)."""
    return Markup((STATIC / "style.css").read_text(encoding="utf-8"))


async def render(name: str, **context: Any) -> str:
    """A server page (nothing streamed: no block of it has ``pieces``)."""
    return environment(streaming=False).get_template(name).render(**context)
