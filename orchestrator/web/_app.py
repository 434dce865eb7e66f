"""The viewer's ASGI application and its server.

Read-only by construction: every route is a GET, and nothing here calls a writing method of
the store. Bound to 127.0.0.1 unless told otherwise (an empty host, which would bind every
interface, is refused). What reaches it is decided as for ``mcp --http``
(``orchestrator.exposure``): only allowed ``Host`` names are answered, however the server is
bound, so a page elsewhere cannot reach the transcripts through DNS rebinding; with a token,
only requests that carry it. Every response carries a Content-Security-Policy that allows only
this server's own stylesheet and script: even a template mistake could not run transcript text
as code.

A running thread's page follows new messages through server-sent events: ``/t/T-…/events``
sends each new message rendered by the same template as the page, then the status, and ends
when the thread does. Every stream is fed by the server's one poller and the streams are
bounded, per thread and in all (``_live.Streams``: a 429 or 503 beyond).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..exposure import Exposure, Guard, announce, bind, expose
from ._live import MAX_PER_THREAD, MAX_STREAMS, POLL_S, Streams, TooManyStreams
from ._templates import KINDS, STATIC, STATUSES, render
from ._views import LIST_LIMIT, SEARCH_LIMIT, message_views, server_links, thread_page

if TYPE_CHECKING:
    from orchestrator.api import Orchestrator
    from store import Store, ThreadInfo

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765

CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class BadRequest(ValueError):
    """A query parameter that makes no sense (400, naming it)."""


class _SecurityHeaders:
    """The security headers on every response (the exposure's refusals included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(
    db: str,
    *,
    exposure: Exposure | None = None,
    create_dirs: bool = False,
    max_streams: int = MAX_STREAMS,
    max_streams_per_thread: int = MAX_PER_THREAD,
    poll_s: float = POLL_S,
) -> ASGIApp:
    """The viewer over the database ``db`` (a path or URL, as ``--db``; ``create_dirs`` as for
    ``Orchestrator.open``); ``exposure``: what reaches it (``exposure.Guard``: the Host names,
    the token), None to answer anything (an app driven in-process); ``max_streams`` and
    ``max_streams_per_thread``: the bounds of the live event streams (``_live.Streams``);
    ``poll_s``: how often their one poller reads the followed threads' rows."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from orchestrator import Orchestrator

        async with await Orchestrator.open(db, create_dirs=create_dirs) as orch:
            app.state.orch = orch
            app.state.streams = Streams(
                orch.store,
                max_streams=max_streams,
                max_per_thread=max_streams_per_thread,
                poll_s=poll_s,
            )
            try:
                yield
            finally:
                await app.state.streams.close()

    routes = [
        Route("/", index),
        Route("/t/{ref}", thread),
        Route("/t/{ref}/events", events),
        Route("/t/{ref}/{what:str}/{seq:int}", whole),  # ?id=TOOL_USE_ID, as the pages link
        Route("/t/{ref}/{what:str}/{seq:int}/{tool_use_id:path}", whole),  # the older form
        Route("/job/{ref}", job),
        Route("/search", search),
        Route("/favicon.ico", favicon),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    from store import RefSyntaxError

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        # a missing or ambiguous thread (the store's) is a 404, a malformed ref or parameter a
        # 400, each a page naming it; anything else is a bug, and a 500
        exception_handlers={
            LookupError: _not_found,
            RefSyntaxError: _bad_request,
            BadRequest: _bad_request,
            TooManyStreams: _too_many,
        },
    )
    return _SecurityHeaders(app if exposure is None else Guard(app, exposure))


def _orch(request: Request) -> Orchestrator:
    orch: Orchestrator = request.app.state.orch
    return orch


def _store(request: Request) -> Store:
    return _orch(request).store


async def _page(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(await render(name, **context), status_code=status_code)


async def _not_found(request: Request, exc: Exception) -> Response:
    return await _page("error.html", 404, code=404, message=str(exc))


async def _bad_request(request: Request, exc: Exception) -> Response:
    return await _page("error.html", 400, code=400, message=str(exc))


async def _too_many(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, TooManyStreams)
    response = await _page("error.html", exc.status, code=exc.status, message=str(exc))
    response.headers["retry-after"] = "30"
    return response


async def _resolve(request: Request, key: str = "ref") -> ThreadInfo:
    ref = request.path_params[key] if key == "ref" else request.query_params[key]
    return (await _store(request).resolve(ref)).thread


def _int(request: Request, key: str, default: int, *, minimum: int | None = None) -> int:
    raw = request.query_params.get(key, "")
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise BadRequest(f"{key}: not a number: {raw!r}") from None
    if minimum is not None and value < minimum:
        raise BadRequest(f"{key}: at least {minimum}, not {value}")
    return value


# ----------------------------------------------------------------- pages


async def index(request: Request) -> Response:
    q = request.query_params
    status = q.get("status") or None
    kind = q.get("kind") or None
    if status is not None and status not in STATUSES:
        raise BadRequest(f"status: one of {', '.join(STATUSES)}, not {status!r}")
    if kind is not None and kind not in KINDS:
        raise BadRequest(f"kind: one of {', '.join(KINDS)}, not {kind!r}")
    job = q.get("job") or None
    rows = await _orch(request).list_threads(
        job=job, status=status, kind=kind, limit=LIST_LIMIT + 1
    )
    return await _page(
        "index.html",
        rows=rows[:LIST_LIMIT],
        more=len(rows) > LIST_LIMIT,
        job=job,
        filters={"status": status, "kind": kind},
    )


async def thread(request: Request) -> Response:
    ref = request.path_params["ref"]
    page = await thread_page(_orch(request), ref, start=_int(request, "from", 1))
    return await _page("thread.html", page=page)


async def job(request: Request) -> Response:
    root = await _orch(request).tree(request.path_params["ref"])
    return await _page("tree.html", root=root, focus=root["focus"])


async def search(request: Request) -> Response:
    q = request.query_params
    query = q.get("q", "").strip()
    job_ref = q.get("job") or None
    hits: list[Any] = []
    if query:
        from store import DatabaseFull, DatabaseUnavailable, RefError, StoreError

        try:
            hits = await _orch(request).search_json(query, job=job_ref, limit=SEARCH_LIMIT)
        except (RefError, DatabaseUnavailable, DatabaseFull):
            raise  # the job's ref (a 404 or 400 naming it), or the database's state (a 500)
        except StoreError as exc:
            # anything else the store refuses to search (a query FTS5 cannot parse, one of
            # too many words) is the query's doing: a 400 naming it, never a 500
            shown = query if len(query) <= 80 else query[:79] + "…"
            raise BadRequest(f"q: cannot search for {shown!r}: {exc}") from None
    name = "_hits.html" if q.get("fragment") else "search.html"
    return await _page(name, query=query, hits=hits, job=job_ref)


async def favicon(request: Request) -> Response:
    return RedirectResponse("/static/favicon.svg", status_code=301)


async def whole(request: Request) -> Response:
    """The whole input or output of one tool call, as plain text (streamed when stored apart).
    The call's id is the query's ``id`` (any string: the pages percent-encode it), or the rest
    of the path in the links of older pages. ``/t/T-…/text/SEQ?id=N``: the whole text (or
    thinking) of block N of message SEQ, which the page caps."""
    what = request.path_params["what"]
    if what not in ("input", "output", "text"):
        raise LookupError(f"no such page: {what}")
    tool_use_id = request.path_params.get("tool_use_id", request.query_params.get("id"))
    if not tool_use_id:
        raise BadRequest("id: the tool-use id is missing (?id=…)")
    store = _store(request)
    info = await _resolve(request)
    seq = request.path_params["seq"]
    msg = await store.message(info.id, seq)
    from store import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

    if what == "text":
        index = int(tool_use_id) if tool_use_id.isascii() and tool_use_id.isdigit() else -1
        prose = msg.content[index] if 0 <= index < len(msg.content) else None
        if isinstance(prose, TextBlock):
            return Response(_encoded(prose.text), media_type="text/plain; charset=utf-8")
        if isinstance(prose, ThinkingBlock):
            return Response(_encoded(prose.thinking), media_type="text/plain; charset=utf-8")
        raise LookupError(f"no text block {tool_use_id} in {info.ref}#{seq}")

    wanted = ToolUseBlock if what == "input" else ToolResultBlock
    block = next(
        (
            b
            for b in msg.content
            if isinstance(b, wanted)
            and (b.id if isinstance(b, ToolUseBlock) else b.tool_use_id) == tool_use_id
        ),
        None,
    )
    if block is None:
        raise LookupError(f"no tool {what} {tool_use_id} in {info.ref}#{seq}")
    if isinstance(block, ToolUseBlock):
        text = json.dumps(block.input, ensure_ascii=False, indent=2) + "\n"
        return Response(_encoded(text), media_type="text/plain; charset=utf-8")
    if block.stored is None:
        return Response(_encoded(block.text), media_type="text/plain; charset=utf-8")

    async def pieces() -> AsyncIterator[bytes]:
        async for piece in store.output_pieces(msg.thread_id, msg.seq, tool_use_id):
            yield _encoded(piece)

    return StreamingResponse(pieces(), media_type="text/plain; charset=utf-8")


def _encoded(text: str) -> bytes:
    # the bytes as stored; a lone surrogate (no UTF-8 form) becomes U+FFFD, never an error
    return text.encode("utf-8", "replace") if not text.isascii() else text.encode()


async def events(request: Request) -> Response:
    """Server-sent events: ``message`` ({seq, html}) for each message after ``after``, then
    ``status`` ({status}) whenever it changes; ``end`` once the thread is terminal.

    Every parameter is checked here, before the response starts: once the stream has begun
    an error can no longer be a 400, only a dropped connection an EventSource retries each
    second, for ever."""
    store = _store(request)
    info = await _resolve(request)
    after = _int(request, "after", info.head_seq, minimum=0)
    last_id = request.headers.get("last-event-id", "")
    if last_id.isascii() and last_id.isdigit():  # a reconnecting EventSource: go on from there
        after = max(after, int(last_id))

    streams: Streams = request.app.state.streams
    streams.acquire(info.id, info.ref)  # or a 429/503 page, before anything is sent

    async def stream() -> AsyncIterator[str]:
        nonlocal after
        status, seen = "", 0
        yield "retry: 1000\n\n"
        while True:
            try:
                seen, now = await streams.changed(info.id, seen)
            except Exception:  # the thread (or the database) is gone: nothing more to follow
                yield "event: end\ndata: {}\n\n"
                return
            if now.head_seq > after:
                msgs = await store.messages(info.id, start=after + 1, end=now.head_seq)
                before = await store.message(info.id, after) if after else None
                views = message_views(now, msgs, before=before, whole=server_links(now.ref))
                for view in views:
                    html = await render("_message.html", m=view)
                    data = json.dumps({"seq": view.seq, "html": html})
                    yield f"id: {view.seq}\nevent: message\ndata: {data}\n\n"
                after = msgs[-1].seq if msgs else now.head_seq
            if str(now.status) != status:
                status = str(now.status)
                yield f"event: status\ndata: {json.dumps({'status': status})}\n\n"
            if now.status.terminal or str(now.status) == "idle":
                yield "event: end\ndata: {}\n\n"
                return

    return _EventStream(
        stream(),
        release=lambda: streams.release(info.id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class _EventStream(StreamingResponse):
    """A stream that gives its slot back however it ends: finished, dropped by the client,
    or cancelled before its first byte (the generator's own ``finally`` would not run then)."""

    def __init__(self, content: AsyncIterator[str], *, release: Callable[[], None], **kw: Any):
        super().__init__(content, **kw)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


# ----------------------------------------------------------------- serving


async def _probe(db: str, *, create_dirs: bool) -> None:
    """Open (and migrate) the database once before serving: a database that cannot be opened
    is the store's error, reported as for any command, not a traceback in uvicorn's log."""
    from ..api import open_database

    async with await open_database(db, create_dirs=create_dirs):
        pass


def serve(
    db: str,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    create_dirs: bool = False,
    allow_hosts: Sequence[str] = (),
    token: str | None = None,
    token_file: str | None = None,
) -> None:
    """Serve the viewer until Ctrl-C (uvicorn). The socket is bound here first
    (``exposure.bind``: an address that cannot be listened on is one line, exit 2, before
    anything is served); then stderr says where it listens, and warns when that is beyond the
    loopback (``exposure.start_lines``). ``allow_hosts``: Host names answered besides this
    machine's; ``token``: required of every request (``token_file``: where it came from)."""
    import uvicorn

    asyncio.run(_probe(db, create_dirs=create_dirs))
    sock = bind(host, port, door="serve")
    exposure = expose(sock, host, allow_hosts=allow_hosts, token=token, token_file=token_file)
    config = uvicorn.Config(
        create_app(db, exposure=exposure, create_dirs=create_dirs),
        log_level="warning",
        lifespan="on",
    )
    announce(exposure, what="read-only", path="/", browser=True)
    with sock:
        uvicorn.Server(config).run(sockets=[sock])
