"""The models a server holds and the state of each (loading, ready, unavailable with a reason).

Compiling an ONNX model takes seconds to minutes, so loads run on one background thread (one at a
time: a compile already uses every core) and the HTTP front end answers meanwhile, reporting the
model not ready. A loaded model is handed to the dispatcher, which is what runs requests on it.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiln.errors import KilnError, UnknownModelError
from kiln.serve.protocol import ModelSpec
from kiln.serve.repository import ModelSource, Repository, load_model

if TYPE_CHECKING:
    from kiln.runtime.model import Model
    from kiln.serve.dispatch import Dispatcher

log = logging.getLogger("kiln.serve")


class State(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass
class StoredModel:
    """One repository model as the server sees it; `source`, `model` and `spec` are set once it is READY."""

    name: str
    state: State
    reason: str = ""
    source: ModelSource | None = None
    model: Model | None = None
    spec: ModelSpec | None = None


class ModelStore:
    """Loads repository models in the background and hands them to `dispatcher`; thread-safe."""

    def __init__(self, repository: Repository, dispatcher: Dispatcher) -> None:
        self.repository = repository
        self.dispatcher = dispatcher
        self._lock = threading.Lock()
        self._models: dict[str, StoredModel] = {}
        self._jobs: queue.SimpleQueue[tuple[str, Future]] = queue.SimpleQueue()
        threading.Thread(target=self._load_loop, name="kiln-serve-loader", daemon=True).start()

    def load_all(self) -> None:
        """Start loading every model of the repository (the server's start)."""
        for name in self.repository.names():
            self.load(name)

    def load(self, name: str) -> Future:
        """Queue a (re)load of `name`; the Future ends when it is READY (None) or failed (its KilnError)."""
        done: Future = Future()
        with self._lock:
            old = self._models.get(name)
            self._models[name] = StoredModel(name, State.LOADING, "", old.source, old.model, old.spec) if old \
                else StoredModel(name, State.LOADING)
        self._jobs.put((name, done))
        return done

    def unload(self, name: str) -> None:
        """Stop serving `name` (its queued and running requests finish first)."""
        with self._lock:
            served = self._models.get(name)
            if served is None or served.state is State.UNAVAILABLE:
                raise UnknownModelError(f"model '{name}' is not loaded")
            self._models[name] = StoredModel(name, State.UNAVAILABLE, "unloaded")
        if served.model is not None:
            self.dispatcher.remove(name)

    def get(self, name: str) -> StoredModel:
        """The state of `name`; UnknownModelError when it was never loaded."""
        with self._lock:
            served = self._models.get(name)
        if served is None:
            raise UnknownModelError(f"unknown model '{name}'")
        return served

    def all(self) -> list[StoredModel]:
        with self._lock:
            return sorted(self._models.values(), key=lambda s: s.name)

    def ready(self) -> bool:
        """True when no model is still loading and every loaded one can run requests (the server's readiness)."""
        return all(s.state is not State.LOADING and (s.state is not State.READY or self.dispatcher.ready(s.name))
                   for s in self.all())

    def _load_loop(self) -> None:
        while True:
            name, done = self._jobs.get()
            try:
                source = self.repository.find(name)
                model = load_model(source)
                self.dispatcher.add(name, model, source.config)
            except KilnError as e:
                self._set(name, StoredModel(name, State.UNAVAILABLE, str(e)))
                log.warning("model %s failed to load: %s", name, e)
                done.set_exception(e)
            except Exception as e:  # noqa: BLE001 - a compiler bug must not end the loader thread
                self._set(name, StoredModel(name, State.UNAVAILABLE, f"{type(e).__name__}: {e}"))
                log.exception("model %s failed to load", name)
                done.set_exception(e)
            else:
                self._finish(name, StoredModel(name, State.READY, "", source, model, ModelSpec.of(model)))
                done.set_result(None)

    def _finish(self, name: str, served: StoredModel) -> None:
        """Mark a load READY, unless the model was unloaded while it compiled: then stop serving it again."""
        with self._lock:
            unloaded = self._models[name].state is State.UNAVAILABLE
            if not unloaded:
                self._models[name] = served
        if unloaded:
            self.dispatcher.remove(name)

    def _set(self, name: str, served: StoredModel) -> None:
        with self._lock:
            self._models[name] = served
