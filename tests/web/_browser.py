"""A real viewer server on a loopback port (uvicorn in a thread of the test process) and a real
browser (Debian's chromium driven by playwright) for the browser test and the screenshots."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"


def browser_missing() -> str | None:
    """Why the browser test cannot run here (None: it can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; never `playwright install`)"
    if not os.path.exists(CHROMIUM) and shutil.which("chromium") is None:
        return "chromium is not installed (apt-get install -y chromium)"
    return None


@contextmanager
def viewer(db: str) -> Iterator[str]:
    """The viewer over ``db`` served at the URL yielded, until the block ends."""
    import uvicorn

    from orchestrator.exposure import bind, expose
    from orchestrator.web import create_app

    sock = bind("127.0.0.1", 0, door="viewer")
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(db, exposure=expose(sock, "127.0.0.1")), log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the viewer did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium browser (playwright's sync API)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
        browser = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()
