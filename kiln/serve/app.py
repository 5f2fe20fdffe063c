"""The HTTP front end of `kiln serve`: a raw ASGI application speaking the KServe v2 protocol as
Triton has it (health, metadata, inference, the model repository API) plus Prometheus /metrics.

It only routes and translates: requests become `InferRequest`s for the dispatcher, whose Future the
handler awaits, so the event loop never runs a model. Every failure becomes a JSON `{"error": ...}`
with the status its ServeError names; nothing a request sends can reach another request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable

from kiln.errors import InputError, KilnError, ModelNotReadyError, RepositoryError, ServeError, UnknownModelError
from kiln.serve import metrics, protocol
from kiln.serve.asgi_io import (
    BodyNotDrained,
    ClientGone,
    Receive,
    Reply,
    Send,
    error_reply,
    header,
    json_reply,
    read_body,
    send_reply,
)
from kiln.serve.dispatch import InferRequest
from kiln.serve.model_store import ModelStore, State, StoredModel

log = logging.getLogger("kiln.serve")

MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?"
Handler = Callable[["Call"], Awaitable[Reply]]


class Call:
    """One request as the handlers see it: the ASGI scope, its body reader, the route's path groups."""

    def __init__(self, scope: dict, receive: Receive, groups: dict[str, str], limit: int) -> None:
        self.scope, self.groups, self.arrival = scope, groups, time.perf_counter()
        self._receive, self._limit = receive, limit

    async def body(self) -> bytes:
        return await read_body(self.scope, self._receive, self._limit)


class KilnApp:
    """The ASGI app over a ModelStore (its models and its dispatcher); bodies above `max_body` bytes get 413."""

    def __init__(self, store: ModelStore, max_body: int) -> None:
        self.store, self.max_body = store, max_body
        self.routes: list[tuple[str, re.Pattern, Handler]] = [(method, re.compile(path), fn) for method, path, fn in [
            ("GET", r"/v2/health/live", self.live),
            ("GET", r"/v2/health/ready", self.ready),
            ("GET", r"/v2/?", self.server_metadata),
            ("GET", MODEL, self.model_metadata),
            ("GET", MODEL + r"/ready", self.model_ready),
            ("GET", MODEL + r"/config", self.model_config),
            ("POST", MODEL + r"/infer", self.infer),
            ("GET", r"/metrics", self.metrics),
            ("POST", r"/v2/repository/index", self.repository_index),
            ("POST", r"/v2/repository/models/(?P<model>[^/]+)/load", self.load),
            ("POST", r"/v2/repository/models/(?P<model>[^/]+)/unload", self.unload),
        ]]

    async def __call__(self, scope: dict, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        try:
            reply = await self._dispatch(scope, receive)
        except ClientGone:
            return
        if log.isEnabledFor(logging.DEBUG):  # before the reply goes out: a client that got it finds the line logged
            log.debug(json.dumps({"method": scope["method"], "path": scope["path"], "status": reply.status,
                                  "ms": round((time.perf_counter() - started) * 1e3, 3), "bytes_out": len(reply.body)}))
        await send_reply(send, reply)

    async def _dispatch(self, scope: dict, receive: Receive) -> Reply:
        path, method = scope["path"], scope["method"]
        allowed = []
        for want, pattern, handler in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if want != method:
                allowed.append(want)
                continue
            return await _answer(handler, Call(scope, receive, match.groupdict(), self.max_body))
        if allowed:
            return error_reply(405, f"{method} is not allowed on {path}; use {', '.join(allowed)}")
        return error_reply(404, f"no endpoint {path}")

    async def live(self, call: Call) -> Reply:
        return Reply(200)

    async def ready(self, call: Call) -> Reply:
        return Reply(200) if self.store.ready() else error_reply(503, "models are still loading or cannot run now")

    async def server_metadata(self, call: Call) -> Reply:
        return json_reply(protocol.server_metadata())

    async def model_metadata(self, call: Call) -> Reply:
        served = self._serving(call)
        return json_reply(protocol.model_metadata(served.name, served.source.version, served.model))

    async def model_ready(self, call: Call) -> Reply:
        served = self._serving(call)
        if not self.store.dispatcher.ready(served.name):
            raise ModelNotReadyError(f"model '{served.name}' cannot run requests now (no replica is up)")
        return Reply(200)

    async def model_config(self, call: Call) -> Reply:
        served = self._serving(call)
        return json_reply(protocol.model_config(served.name, served.model, served.source.config))

    async def infer(self, call: Call) -> Reply:
        served = self._serving(call)
        body = await call.body()
        parsed = protocol.parse_infer(body, header(call.scope, b"inference-header-content-length"), served.spec,
                                      served.name)
        request = InferRequest(served.name, parsed.feeds, parsed.outputs, parsed.priority, parsed.timeout_s,
                               call.arrival)
        results = await asyncio.wrap_future(self.store.dispatcher.submit(request))
        out, header_length = protocol.encode_infer(served.name, served.source.version, parsed, results)
        if header_length is None:
            return Reply(200, out, [(b"content-type", b"application/json")])
        return Reply(200, out, [(b"content-type", b"application/octet-stream"),
                                (b"inference-header-content-length", str(header_length).encode())])

    async def metrics(self, call: Call) -> Reply:
        ready = {s.name: s.state is State.READY for s in self.store.all()}
        text = metrics.render(self.store.dispatcher.stats(), ready)
        return Reply(200, text.encode(), [(b"content-type", metrics.CONTENT_TYPE.encode())])

    async def repository_index(self, call: Call) -> Reply:
        body = await call.body()
        doc = protocol.read_json(body) if body.strip() else {}
        if not isinstance(doc, dict):
            raise ServeError("repository index request must be a JSON object, e.g. {\"ready\": true}")
        only_ready = doc.get("ready", False) is True
        states = {s.name: s for s in self.store.all()}
        rows = []
        for name in sorted(set(self.store.repository.names()) | set(states)):
            served = states.get(name)
            row = {"name": name, "state": served.state.value if served else "UNAVAILABLE",
                   "reason": served.reason if served else "not loaded"}
            if served is not None and served.source is not None:
                row["version"] = served.source.version
            if not only_ready or row["state"] == State.READY.value:
                rows.append(row)
        return json_reply(rows)

    async def load(self, call: Call) -> Reply:
        await call.body()
        name = call.groups["model"]
        self.store.repository.find(name)  # an unknown or unservable model fails now, before any state changes
        try:
            await asyncio.wrap_future(self.store.load(name))
        except KilnError as e:
            raise RepositoryError(f"model '{name}' failed to load: {e}") from None
        return Reply(200)

    async def unload(self, call: Call) -> Reply:
        await call.body()
        self.store.unload(call.groups["model"])
        return Reply(200)

    def _serving(self, call: Call) -> StoredModel:
        """The model the path names, loaded (at the version it names, when it names one)."""
        name, version = call.groups["model"], call.groups.get("version")
        served = self.store.get(name)
        if served.state is State.LOADING and served.model is None:  # a reload serves the old model meanwhile
            raise ModelNotReadyError(f"model '{name}' is loading")
        if served.state is State.UNAVAILABLE:
            raise UnknownModelError(f"model '{name}' is not available: {served.reason}")
        if version is not None and version != served.source.version:
            raise UnknownModelError(f"model '{name}' has no version '{version}'; version {served.source.version} "
                                    "is served")
        return served


async def _answer(handler: Handler, call: Call) -> Reply:
    """The handler's reply, or the error reply its failure deserves."""
    try:
        return await handler(call)
    except ServeError as e:
        return error_reply(e.status, str(e), close=isinstance(e, BodyNotDrained))
    except InputError as e:
        return error_reply(400, str(e))
    except KilnError as e:
        return error_reply(500, f"{type(e).__name__}: {e}")
    except ClientGone:
        raise
    except Exception as e:  # noqa: BLE001 - one request's failure must not take down the server
        log.exception("request %s %s failed", call.scope["method"], call.scope["path"])
        return error_reply(500, f"internal error: {type(e).__name__}: {e}")


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop with the event loop: models load on the store's own thread."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
