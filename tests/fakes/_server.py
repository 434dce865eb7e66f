"""Shared machinery of the loopback fake API servers.

A ``FakeServer`` is a real HTTP/1.1 server (stdlib ``ThreadingHTTPServer`` on 127.0.0.1, port 0
by default) running in a background thread; use it as a context manager or call ``start()`` /
``close()``. Every request is recorded (``.requests``); faults queued with ``.inject(kind,
times=n, **params)`` are applied to the next n requests, before any validation, in the order they
were injected. Subclasses implement ``handle(recorded) -> Reply | DROP``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar


@dataclass
class RecordedRequest:
    """One HTTP request as received. ``json`` is None when the body is not JSON; ``outcome`` says
    what the server did: ``ok``, ``rejected``, ``fault:<kind>`` or ``not_found``."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    outcome: str = ""
    status: int | None = None


@dataclass
class Rejection:
    """A request the validator refused, as the real API would."""

    status: int
    error_type: str
    message: str
    request: RecordedRequest


@dataclass
class Fault:
    kind: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    dribble_s: float = 0.0
    """When > 0 the body goes out one byte at a time, this long apart (a server generating
    slowly); a client that hangs up meanwhile lands in ``FakeServer.disconnects``."""

    @classmethod
    def json(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
        body = json.dumps(payload, ensure_ascii=False).encode()
        return cls(status, body, {"content-type": "application/json", **(headers or {})})


DROP = object()
"""Returned by ``handle`` to close the connection without sending any response."""


class FakeServer:
    FAULT_KINDS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._faults: deque[Fault] = deque()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[RecordedRequest] = []
        self.rejections: list[Rejection] = []
        self.disconnects: list[RecordedRequest] = []
        """Requests whose client hung up before the whole reply was sent."""
        self._changed = threading.Condition(self._lock)  # a request came, or a client went

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeServer:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._httpd = ThreadingHTTPServer((self._host, self._port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake server is not started")
        return int(self._httpd.server_address[1])

    @property
    def root_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    # -- faults ----------------------------------------------------------------------------------

    def inject(self, kind: str, *, times: int = 1, **params: Any) -> None:
        """Apply fault ``kind`` to the next ``times`` requests (see the subclass for kinds)."""
        if kind not in self.FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {sorted(self.FAULT_KINDS)}")
        with self._lock:
            self._faults.extend(Fault(kind, dict(params)) for _ in range(times))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def pending_faults(self) -> int:
        with self._lock:
            return len(self._faults)

    def take_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake up when the server closes."""
        self._stop.wait(seconds)

    # -- recording -------------------------------------------------------------------------------

    def record(self, request: RecordedRequest) -> None:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()

    def wait_for_requests(self, n: int = 1, *, timeout: float = 10.0) -> bool:
        """Wait until ``n`` requests have arrived; False if ``timeout`` passes first."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.requests) >= n, timeout)

    def reject(
        self, recorded: RecordedRequest, status: int, error_type: str, message: str
    ) -> Rejection:
        rejection = Rejection(status, error_type, message, recorded)
        with self._lock:
            self.rejections.append(rejection)
        recorded.outcome = "rejected"
        return rejection

    def client_gone(self, recorded: RecordedRequest) -> None:
        with self._changed:
            self.disconnects.append(recorded)
            self._changed.notify_all()

    def wait_for_disconnects(self, n: int = 1, *, timeout: float = 10.0) -> bool:
        """Wait until ``n`` clients have hung up mid-reply; False if ``timeout`` passes first."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.disconnects) >= n, timeout)

    def handle(self, recorded: RecordedRequest) -> Reply | object:
        raise NotImplementedError


class _Handler(BaseHTTPRequestHandler):
    server_fake: ClassVar[FakeServer]
    protocol_version = "HTTP/1.1"
    timeout = 30  # idle keep-alive connections end eventually

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(body) if body else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            parsed = None
        recorded = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            json=parsed,
        )
        self.server_fake.record(recorded)
        try:
            reply = self.server_fake.handle(recorded)
        except Exception as exc:  # a bug in a responder: answer 500 rather than hang the client
            recorded.outcome = "error"
            reply = Reply.json(
                500,
                {"type": "error", "error": {"type": "api_error", "message": f"fake: {exc!r}"}},
            )
        if reply is DROP or not isinstance(reply, Reply):
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        recorded.status = reply.status
        try:
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            if reply.dribble_s > 0:
                for i in range(len(reply.body)):
                    self.wfile.write(reply.body[i : i + 1])
                    self.wfile.flush()
                    self.server_fake.sleep(reply.dribble_s)
            else:
                self.wfile.write(reply.body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True  # the client gave up (a ``slow`` fault): fine
            self.server_fake.client_gone(recorded)
