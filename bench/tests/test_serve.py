"""`bench.serve`: uvicorn's pre-bound listener must give connections TCP_NODELAY (uvicorn #3149)."""

from __future__ import annotations

import asyncio
import socket

from uvicorn.config import Config

from bench import serve


async def _accepted_nodelay(listener: socket.socket) -> int:
    """Serve `listener` with asyncio, connect once; return TCP_NODELAY of the accepted socket."""
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
    async with server:
        _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
        value = await asyncio.wait_for(accepted, timeout=5)
        writer.close()
    return value


def test_uvicorns_bound_socket_is_declared_tcp() -> None:
    sock = serve.bind_socket(Config(app="config.asgi:application", host="127.0.0.1", port=0))
    with sock:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.get_inheritable()


def test_connections_on_the_bound_socket_get_tcp_nodelay() -> None:
    sock = serve.bind_socket(Config(app="config.asgi:application", host="127.0.0.1", port=0))
    sock.listen()
    assert asyncio.run(_accepted_nodelay(sock)) != 0


def test_other_sockets_are_left_alone() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        assert serve.with_tcp_protocol(unix) is unix
