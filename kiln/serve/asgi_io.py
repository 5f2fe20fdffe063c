"""Reading a request body and sending a reply over raw ASGI (what uvicorn calls the app with).

The body is bounded while it arrives: an oversized one is read on and dropped (up to DRAIN_FACTOR
times the limit) so that the 413 goes out on a connection that can be reused; closing a socket with
unread data makes the kernel reset it, and the client may then never see the 413. Beyond that the
reply closes the connection. A gzip or deflate body (tritonclient's request compression) is
inflated under the same bound.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kiln.errors import BodyTooLargeError, ServeError

Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]
INFLATE_WBITS = {"gzip": 31, "deflate": 15}
DRAIN_FACTOR = 4


class ClientGone(Exception):
    """The client closed the connection before its request body arrived."""


class BodyNotDrained(BodyTooLargeError):
    """A body so far over the limit that the rest of it is left unread: the connection must close."""


@dataclass
class Reply:
    status: int
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def json_reply(doc: Any, status: int = 200) -> Reply:
    return Reply(status, json.dumps(doc, separators=(",", ":")).encode(), [(b"content-type", b"application/json")])


def error_reply(status: int, message: str, close: bool = False) -> Reply:
    reply = json_reply({"error": message}, status)
    if close:
        reply.headers.append((b"connection", b"close"))
    return reply


def header(scope: dict, name: bytes) -> str | None:
    """The first value of header `name` (lower case) as text."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def read_body(scope: dict, receive: Receive, limit: int) -> bytes:
    """The request body, at most `limit` bytes after decoding (BodyTooLargeError beyond it)."""
    declared = header(scope, b"content-length")
    size = int(declared) if declared is not None and declared.isdigit() else 0
    if size > DRAIN_FACTOR * limit:
        raise BodyNotDrained(f"request body is {declared} bytes; the limit is {limit} (kiln serve --max-body-mb)")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > DRAIN_FACTOR * limit:
            raise BodyNotDrained(f"request body exceeds the limit of {limit} bytes (kiln serve --max-body-mb)")
        if size <= limit:
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    if size > limit:
        raise BodyTooLargeError(f"request body is {size} bytes; the limit is {limit} (kiln serve --max-body-mb)")
    return _decode(b"".join(chunks), header(scope, b"content-encoding"), limit)


def _decode(body: bytes, encoding: str | None, limit: int) -> bytes:
    if encoding in (None, "identity"):
        return body
    if encoding not in INFLATE_WBITS:
        raise ServeError(f"Content-Encoding {encoding!r} is not supported; send identity, gzip or deflate")
    inflater = zlib.decompressobj(INFLATE_WBITS[encoding])
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as e:
        raise ServeError(f"request body is not valid {encoding} data: {e}") from None
    if len(out) > limit:
        raise BodyTooLargeError(f"request body inflates beyond the limit of {limit} bytes (kiln serve --max-body-mb)")
    return out


async def send_reply(send: Send, reply: Reply) -> None:
    headers = [*reply.headers, (b"content-length", str(len(reply.body)).encode())]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})
