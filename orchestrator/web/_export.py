"""``threadloom export REF --format html``: the thread page as one self-contained file.

The same template as the server's page, rendered with ``standalone``: the stylesheet inlined,
no script, a Content-Security-Policy that forbids every fetch, and every message of the range
on one page with tool inputs and outputs whole — the export is the record. Outputs stored apart are
streamed from the store while the page is written, so memory holds one piece at a time.

Links are ``_views.Links``'s, as on the server's page: a ref to a message in the file is its
anchor (``#3``); a ref to anything else links to the viewer at ``base_url`` when one is given
(``export --base-url``), and is plain text otherwise — never a ``/t/…`` path, which leads
nowhere from a file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._templates import environment, stylesheet
from ._views import export_page

if TYPE_CHECKING:
    from store import Store


async def write_thread_html(
    store: Store,
    ref: str,
    write: Callable[[str], Any],
    *,
    redact: bool = False,
    base_url: str | None = None,
) -> int:
    """Write the page of thread ``ref`` (every message, or the range it names: ``T-…#3-9``)
    through ``write``; the number of messages written. ``redact``: secrets masked in every
    string before it is escaped — each output stored apart masked as one stream, never chunk
    by chunk (a secret cut by a chunk boundary is masked whole); ``base_url``: the viewer
    other threads' refs link to."""
    from orchestrator.api import Orchestrator

    page = await export_page(Orchestrator(store), ref, redact=redact, base_url=base_url)
    template = environment(redacted=redact).get_template("thread.html")
    async for chunk in template.generate_async(page=page, standalone=True, css=stylesheet()):
        write(chunk)
    return len(page.messages)
