"""uvicorn's graceful shutdown, without dropping the requests already written to accepted connections.

On SIGTERM uvicorn stops listening and closes every idle keep-alive connection at once. A request a
client wrote to such a connection just before the signal may still sit unread in the kernel's
receive buffer: the connection looks idle, is closed, and the kernel answers the unread bytes with a
reset. The client never learns whether its request ran (measured with scripts/serve_soak_http.py on a
busy 2-core machine: 1 to 6 of 16 requests written just before SIGTERM were reset). DrainingServer
stops listening first, then lets the event loop read what idle connections have pending (FIONREAD
says how much), so those requests start and are drained like any in flight; then uvicorn's own
shutdown runs. A connection still in the listening socket's backlog is refused by the kernel when
the listener closes; its client gets an error before sending anything, which it may retry elsewhere.
"""

from __future__ import annotations

import asyncio
import fcntl
import socket
import struct
import termios
import time
from typing import Any

import uvicorn

PENDING_INPUT_WAIT_S = 1.0  # at most this long for the loop to read requests already in the kernel's buffers


class DrainingServer(uvicorn.Server):
    """A uvicorn.Server whose shutdown reads requests that arrived on idle connections before closing them."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        deadline = time.monotonic() + PENDING_INPUT_WAIT_S
        while time.monotonic() < deadline and any(_unread_request(c) for c in list(self.server_state.connections)):
            await asyncio.sleep(0.001)
        await super().shutdown(sockets)


def _unread_request(connection: Any) -> bool:
    """Whether `connection` looks idle to uvicorn (no response under way) while bytes wait in its socket."""
    cycle = getattr(connection, "cycle", None)
    if cycle is not None and not cycle.response_complete:
        return False  # a request being answered: uvicorn's shutdown lets it finish
    transport = getattr(connection, "transport", None)
    if transport is None or transport.is_closing() or not transport.is_reading():
        return False
    sock = transport.get_extra_info("socket")
    return sock is not None and _pending_bytes(sock.fileno()) > 0


def _pending_bytes(fd: int) -> int:
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0
