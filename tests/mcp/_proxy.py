"""A loopback TCP proxy that adds ``Authorization: Bearer TOKEN`` to every HTTP request it
forwards, and changes nothing else (the ``Host`` header, the body, the streamed replies): how a
tool that cannot send a header — the official conformance suite — talks to ``mcp --http``,
whose every request needs the token."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

MAX_HEAD = 64 * 1024


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _requests(client: socket.socket, upstream: socket.socket, header: bytes) -> None:
    """Each request from ``client``, its head given ``header``, its body (``Content-Length``)
    as it came; keep-alive connections carry any number of them."""
    buffered = b""
    with contextlib.suppress(OSError):
        while True:
            while b"\r\n\r\n" not in buffered:
                chunk = client.recv(65536)
                if not chunk:
                    upstream.shutdown(socket.SHUT_WR)
                    return
                buffered += chunk
                assert len(buffered) < MAX_HEAD, "request head too large"
            head, buffered = buffered.split(b"\r\n\r\n", 1)
            lines = head.split(b"\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
                assert name.strip().lower() != b"transfer-encoding", "chunked bodies: not here"
            while len(buffered) < length:
                chunk = client.recv(65536)
                if not chunk:
                    return
                buffered += chunk
            body, buffered = buffered[:length], buffered[length:]
            upstream.sendall(b"\r\n".join([lines[0], header, *lines[1:]]) + b"\r\n\r\n" + body)


@contextlib.contextmanager
def bearer_proxy(upstream_port: int, token: str) -> Iterator[int]:
    """A proxy to ``127.0.0.1:upstream_port`` adding the token; yields its own port."""
    header = f"Authorization: Bearer {token}".encode()
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", upstream_port))
            threading.Thread(target=_requests, args=(client, upstream, header), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        # close() alone does not wake a thread blocked in accept() (Linux): each use of the
        # proxy then waited out the whole join below, 5 s; shutdown() makes accept() fail now
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)
        assert not thread.is_alive(), "the proxy's accept loop did not stop"
