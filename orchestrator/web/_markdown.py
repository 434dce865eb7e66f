"""An assistant's text as Markdown, made safe for a page: markdown-it-py's CommonMark (and GFM
tables and strikethrough) with raw HTML off, so a ``<script>`` in the text is text.

- The text is drawn first (``_text.shown``: invisible characters made visible; secrets masked
  first on a redacted export), then parsed: what the reader sees is what was written.
- Entities are not decoded (``&amp;`` stays the five characters the model wrote), and images
  are not fetched (``![alt](url)`` is shown as text: a page fetches nothing of a transcript's).
- A link leads only to an ``http(s)`` URL or a ref (``T-…``, ``T-…#7``), which goes where
  ``Links`` sends it (the message's anchor when it is on the page); any other target
  (``javascript:``, ``data:``, a relative path) is not a link, its text stays. A bare ref in
  the text is a link too.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup

from store import REF_IN_TEXT
from workers import redact

from ._text import shown

if TYPE_CHECKING:
    from markdown_it.renderer import RendererHTML
    from markdown_it.rules_core import StateCore
    from markdown_it.utils import OptionsDict

    from ._views import Links

_WEB = re.compile(r"(?i)https?://[^\s]+\Z")
_REF = re.compile(rf"(?<![\w/#.-])(?:{REF_IN_TEXT.pattern})(?![\w-])")
"""A ref in a text (``store.REF_IN_TEXT``), not inside a word or a path."""


def _target(href: str, links: Links) -> str | None:
    """Where a link of the text may lead: an http(s) URL as written, a ref where ``links``
    sends it; None for anything else."""
    if _WEB.match(href):
        return href
    ref = unquote(href)  # as markdown-it normalized it: ``T-…x2p4`` is ``T-%E2%80%A6x2p4``
    return links.ref(ref) if _REF.fullmatch(ref) else None


def _link_open(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: Any
) -> str:
    token = tokens[idx]
    target = _target(str(token.attrGet("href") or ""), env["links"])
    env["open"].append(target is not None)
    if target is None:
        return ""
    token.attrs = {"href": target}
    if _WEB.match(target):
        token.attrs["rel"] = "noopener noreferrer nofollow"
    return self.renderToken(tokens, idx, options, env)


def _link_close(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: Any
) -> str:
    return self.renderToken(tokens, idx, options, env) if env["open"].pop() else ""


def _bare_refs(state: StateCore) -> None:
    """Each ref written in plain text (outside code and links) as a link to it."""
    for block in state.tokens:
        if block.type != "inline" or not block.children:
            continue
        out: list[Token] = []
        depth = 0
        for tok in block.children:
            depth += tok.type == "link_open"
            depth -= tok.type == "link_close"
            if tok.type != "text" or depth or not _REF.search(tok.content):
                out.append(tok)
                continue
            pos = 0
            for m in _REF.finditer(tok.content):
                if m.start() > pos:
                    out.append(_text(tok.content[pos : m.start()]))
                link = Token("link_open", "a", 1)
                link.attrs = {"href": m.group()}
                out += [link, _text(m.group()), Token("link_close", "a", -1)]
                pos = m.end()
            if pos < len(tok.content):
                out.append(_text(tok.content[pos:]))
        block.children = out


def _text(content: str) -> Token:
    tok = Token("text", "", 0)
    tok.content = content
    return tok


@cache
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable(["image", "entity", "html_inline", "html_block"])
    md.validateLink = lambda url: True  # type: ignore[method-assign]  # ``_target`` judges
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("link_close", _link_close)
    md.core.ruler.push("bare_refs", _bare_refs)
    return md


_MARKUP = re.compile(r"[\\`*_\[\]<>&|~!\t\r]|[ ]\n|[ ]\Z|T-")
"""A character (or a trailing space: a hard break) that may be Markdown anywhere in a line."""
_LINE_START = re.compile(r"(?m)^(?:[ #>+=-]|[0-9]+[.)])")
"""A line start that may be Markdown: indented code, a heading, a quote, a list, a rule."""


def _plain(text: str) -> str | None:
    """The HTML markdown-it makes of ``text`` when nothing in it can be Markdown (its
    paragraphs), without parsing it; None when something may be. Most short texts of a
    transcript are plain, and parsing one costs ~0.3 ms: 100 on a page, a third of its time."""
    if _MARKUP.search(text) or _LINE_START.search(text):
        return None
    paragraphs = [p for p in re.split(r"\n{2,}", text.strip("\n").replace('"', "&quot;")) if p]
    return "".join(f"<p>{p}</p>\n" for p in paragraphs)


def markdown(text: str, links: Links, *, redacted: bool = False) -> Markup:
    """``text`` (Markdown) as safe HTML: raw HTML shown as text, links only to http(s) URLs
    and refs."""
    drawn = shown(redact(text) if redacted else text)
    plain = _plain(drawn)
    html = plain if plain is not None else _parser().render(drawn, {"links": links, "open": []})
    # markdown-it escapes &, <, > and " only; ' too, as Jinja does everywhere else on the page,
    # so no text can close a quote whatever attribute it lands in (its own attributes are
    # double-quoted, where &#39; reads back as ')
    return Markup(html.replace("'", "&#39;"))
