"""Screenshots of the viewer: a thread page and a job tree, as a person sees them.

    .venv/bin/python -m tests.web.screens [OUT_DIR]    (default /work/notes/screens)

Builds the tests' demo database in a temporary directory, serves it on a loopback port and
has chromium take ``thread.png`` (the worker thread, its long tool output expanded) and
``tree.png`` (the job tree). Not a test and not test output: nothing here is committed.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.web._browser import chromium, viewer
from tests.web.conftest import _make


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "threads.db"
        refs = asyncio.run(_make(db))
        with viewer(str(db)) as url, chromium() as browser:
            page = browser.new_page(viewport={"width": 1100, "height": 1400})
            page.goto(f"{url}/t/{refs.worker}")
            page.locator(f"article[id='{refs.long_seq}'] details.tool summary").click()
            page.screenshot(path=str(out / "thread.png"), full_page=True)
            page.set_viewport_size({"width": 1100, "height": 600})
            page.goto(f"{url}/job/{refs.worker}")
            page.screenshot(path=str(out / "tree.png"), full_page=True)
    print(out / "thread.png", out / "tree.png")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/work/notes/screens"))
