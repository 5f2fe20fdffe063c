"""A real `kiln serve` front end (uvicorn, httptools) on a free loopback port, in a thread of the test
process, over any Dispatcher: the tests talk to it through sockets as a client would."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kiln.serve.app import KilnApp
from kiln.serve.model_store import ModelStore
from kiln.serve.repository import Repository
from kiln.serve.server import listening_socket, uvicorn_server


class RunningServer:
    def __init__(self, repo: Path, dispatcher, max_body: int = 1 << 20) -> None:
        self.dispatcher = dispatcher
        self.store = ModelStore(Repository(repo), dispatcher)
        self.server = uvicorn_server(KilnApp(self.store, max_body))
        sock = listening_socket("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self.url = f"127.0.0.1:{self.port}"
        self.store.load_all()
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        _wait(lambda: self.server.started and self.store.ready(), "the server to start and load its models")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)
        self.dispatcher.close(drain=True)


def _wait(ready, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s} s for {what}")
        time.sleep(0.02)
