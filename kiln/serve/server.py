"""`kiln serve`: the repository's models behind uvicorn (httptools parser, keep-alive) until SIGTERM
or SIGINT.

TCP_NODELAY: uvicorn leaves sockets to asyncio, whose socket transport sets TCP_NODELAY on an accepted
connection only when its socket says protocol IPPROTO_TCP (asyncio.base_events._set_nodelay); the
listening socket is made with that protocol so that every accepted one has it. Without it uvicorn's
two writes per response (head, then body) meet Nagle and delayed ACK: 40 ms per request.
Shutdown: uvicorn stops accepting, reads requests already waiting on idle connections
(kiln.serve.graceful), closes idle keep-alive connections and waits for requests in
flight (each awaits its dispatcher Future, so every queued request is answered); then the
dispatcher is closed with drain. uvicorn re-raises the signal it caught once it is done; the
handlers installed here make that a no-op so that a clean shutdown exits with status 0.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kiln.errors import KilnError
from kiln.serve.app import KilnApp
from kiln.serve.model_store import ModelStore
from kiln.serve.repository import Repository

if TYPE_CHECKING:
    from kiln.serve.dispatch import Dispatcher

SCHEDULERS = ("reef", "fifo")
KEEP_ALIVE_S = 30


def make_dispatcher(name: str, ray: str | bool = False) -> Dispatcher:
    """The scheduler `kiln serve --scheduler` names: "reef" (RT before BE, preemption) or "fifo" (one queue);
    with `ray` (True: a local cluster; a string: the cluster's address) runs go to each model's Ray replicas."""
    if name not in SCHEDULERS:
        raise KilnError(f"unknown scheduler '{name}'; the schedulers are {', '.join(SCHEDULERS)}")
    if ray is not False:
        from kiln.distributed.replica_dispatcher import RayDispatcher

        return RayDispatcher(None if ray is True else ray, fifo=name == "fifo")
    try:
        from kiln.serve.scheduler import ReefScheduler
    except ModuleNotFoundError as e:
        if e.name != "kiln.serve.scheduler":
            raise
        raise KilnError("this Kiln has no request scheduler (kiln.serve.scheduler is missing)") from None
    return ReefScheduler(fifo=name == "fifo")


def uvicorn_server(app: KilnApp, sock: socket.socket | None = None, host: str = "127.0.0.1",
                   port: int = 8000) -> Any:
    """A uvicorn server (DrainingServer) for `app` on `sock` when given, else on host:port; access log off
    (the app logs one JSON line per request at debug level instead)."""
    try:
        import httptools  # noqa: F401 - uvicorn imports it only once running: a traceback there
        import uvicorn
    except ModuleNotFoundError:
        raise KilnError("kiln serve needs uvicorn and httptools: pip install kiln[serve]") from None
    from kiln.serve.graceful import DrainingServer

    config = uvicorn.Config(app, host=host, port=port, http="httptools", loop="asyncio", lifespan="off",
                            access_log=False, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S)
    return DrainingServer(config)


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before uvicorn starts so that the port is known (port 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # NOTE: see the module doc on TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise KilnError(f"kiln serve cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


def serve(repo: str, host: str = "127.0.0.1", port: int = 8000, scheduler: str = "reef", max_body_mb: float = 64,
          dispatcher: Dispatcher | None = None, ray: str | bool = False) -> int:
    """Serve the models of directory `repo` until SIGTERM/SIGINT; 0 once every request in flight is answered.
    `ray`: run requests on Ray replicas (True: a local cluster; a string: the cluster's address)."""
    if not max_body_mb > 0:
        raise KilnError(f"--max-body-mb must be positive, got {max_body_mb}")
    repository = Repository(repo)
    dispatcher = dispatcher if dispatcher is not None else make_dispatcher(scheduler, ray)
    store = ModelStore(repository, dispatcher)
    server = uvicorn_server(KilnApp(store, int(max_body_mb * 2**20)))
    sock = listening_socket(host, port)
    bound = sock.getsockname()
    store.load_all()
    print(f"kiln serve: {len(repository.names())} model(s) from {repo} on http://{host}:{bound[1]} "
          f"(scheduler {scheduler}{', on Ray' if ray is not False else ''})", file=sys.stderr, flush=True)
    with _signals_after_shutdown_ignored():
        server.run(sockets=[sock])
    dispatcher.close(drain=True)
    return 0


@contextlib.contextmanager
def _signals_after_shutdown_ignored() -> Iterator[None]:
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ignore(sig: int, frame: Any) -> None:
    """The signal uvicorn raises again after its graceful shutdown: already handled."""
