"""`python -m bench.serve …`: uvicorn's command line, with TCP_NODELAY on every connection.

The bench runs uvicorn with `--workers N`. Then uvicorn binds the listening socket
itself and leaves its `proto` at 0; accepted sockets inherit it, and asyncio only
turns Nagle's algorithm off (TCP_NODELAY) for sockets that say IPPROTO_TCP, so every
keep-alive request after the first would wait for the client's delayed ACK and the
bench would measure that wait (uvicorn issue #3149; docs/benchmarks.md). The fix is to
re-wrap the bound socket with its protocol stated; everything else is uvicorn's.
"""

from __future__ import annotations

import socket

from uvicorn.config import Config
from uvicorn.main import main

_uvicorn_bind_socket = Config.bind_socket


def with_tcp_protocol(sock: socket.socket) -> socket.socket:
    """Return `sock` re-wrapped as IPPROTO_TCP when it is an internet stream socket that did not say so."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM or sock.proto:
        return sock
    tcp = socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
    tcp.set_inheritable(True)  # uvicorn's worker processes receive it
    return tcp


def bind_socket(config: Config) -> socket.socket:
    """Bind as uvicorn does, then state the socket's protocol so asyncio sets TCP_NODELAY."""
    return with_tcp_protocol(_uvicorn_bind_socket(config))


Config.bind_socket = bind_socket  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
