"""Screenshots of the viewer, as a person sees it, on a wide and a narrow screen.

    .venv/bin/python -m tests.web.screens [OUT_DIR]    (default /work/notes/screens)

Builds the tests' demo database in a temporary directory, imports a real Claude Code session
with a subagent into it (``/work/shared/realsessions``, when there), serves it on a loopback
port and has chromium take each page at 1280 and 400 px wide: the list, a worker's thread (its
long tool output expanded), the imported session (its ``Task`` call and the subagent it ran),
the job tree and a search — ``<page>-<width>.png``. Not a test and not test output: nothing
here is committed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from tests.orchestrator.test_cli_helpers import run_cli
from tests.realsessions import CLAUDE
from tests.web._browser import chromium, viewer
from tests.web.conftest import _make

REAL = CLAUDE / "-Users-User-repo-codemie-ai-codemie-code"
WIDTHS = (1280, 400)


def _import(db: Path) -> str | None:
    """The ref of the imported session's main thread with a subagent (None without it)."""
    if not REAL.is_dir():
        return None
    done = run_cli("--json", "import", str(REAL), db=db)
    threads = json.loads(done.stdout)["threads"]
    return next(t["parent"] for t in threads if t["kind"] == "worker" and t["parent"])


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "threads.db"
        refs = asyncio.run(_make(db))
        imported = _import(db)
        pages = {
            "list": "/",
            "thread": f"/t/{refs.worker}",
            "lead": f"/t/{refs.lead}",
            "tree": f"/job/{refs.worker}",
            "search": "/search?q=tokenizer",
        }
        if imported:
            pages["imported"] = f"/t/{imported}"
        with viewer(str(db)) as url, chromium() as browser:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 900})
                for name, path in pages.items():
                    response = page.goto(url + path)
                    assert response is not None and response.ok, (path, response)
                    if name == "thread":
                        page.locator(f"article[id='{refs.long_seq}'] details.tool summary").click()
                    overflow = page.evaluate(
                        "document.documentElement.scrollWidth - window.innerWidth"
                    )
                    shot = out / f"{name}-{width}.png"
                    page.screenshot(path=str(shot), full_page=True)
                    shots.append(f"{shot} (overflow {overflow}px)")
                page.close()
    print("\n".join(shots))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/work/notes/screens"))
