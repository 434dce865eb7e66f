import socket

import pytest


def test_connecting_to_a_public_address_fails() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(RuntimeError, match="may not reach the network"):
            s.connect(("93.184.216.34", 443))
    finally:
        s.close()


def test_resolving_a_public_name_fails() -> None:
    with pytest.raises(RuntimeError, match="name lookup"):
        socket.getaddrinfo("api.anthropic.com", 443)


def test_loopback_is_allowed() -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        client.connect(server.getsockname())
    finally:
        client.close()
        server.close()
