"""DrainingServer: a request written to an idle keep-alive connection just before shutdown is answered.

The race is made exact: in one step of the server's event loop the client writes its request and
shutdown starts, so the request is in the kernel's buffer, unread, when shutdown looks at the
connection (plain uvicorn closes it then, and the client gets a reset)."""

from __future__ import annotations

import asyncio
import socket

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("httptools")

import uvicorn  # noqa: E402

from kiln.serve.graceful import DrainingServer  # noqa: E402
from kiln.serve.server import listening_socket  # noqa: E402

REQUEST = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"


async def _app(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def _read_response(loop: asyncio.AbstractEventLoop, client: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"ok"):
        chunk = await loop.sock_recv(client, 4096)
        if not chunk:
            break
        data += chunk
    return data


async def _request_during_shutdown(server_class: type[uvicorn.Server]) -> bytes:
    config = uvicorn.Config(_app, http="httptools", loop="asyncio", lifespan="off", log_level="warning")
    config.load()
    server = server_class(config)
    server.lifespan = config.lifespan_class(config)
    sock = listening_socket("127.0.0.1", 0)
    await server.startup(sockets=[sock])
    loop = asyncio.get_running_loop()
    client = socket.create_connection(sock.getsockname())
    client.setblocking(False)
    try:
        await loop.sock_sendall(client, REQUEST)
        assert (await _read_response(loop, client)).startswith(b"HTTP/1.1 200")  # accepted, now idle
        client.send(REQUEST)  # in the kernel's buffer; the loop has not read it
        shutdown = asyncio.ensure_future(server.shutdown(sockets=[sock]))
        try:
            answer = await _read_response(loop, client)
        except ConnectionResetError:
            answer = b""
        await shutdown
        return answer
    finally:
        client.close()


def test_request_on_idle_connection_at_shutdown_is_answered():
    answer = asyncio.run(_request_during_shutdown(DrainingServer))
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok"), answer
