"""The object a Ray actor holds: one compiled Kiln model, loaded from a bundle, that runs feeds.

It is a plain class so that tests and the in-process paths use it directly; the distributed paths
make it an actor with `ray.remote(ModelWorker).options(...)` (their own resources and restart
policy). Outputs come back by name, as numpy arrays, so one worker's results can be the next
worker's feeds (an ObjectRef of that dict passes between actors without the driver fetching it).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import numpy as np

from kiln.distributed.bundle import Bundle, unpack


class ModelWorker:
    """A compiled model unpacked on this node and loaded with `threads` cores."""

    def __init__(self, bundle: Bundle, threads: int | None = None, name: str = "model") -> None:
        from kiln.session import load  # the runtime only: a worker never imports the compiler

        self.name = name
        self._directory = unpack(bundle)
        self._session = load(self._directory, threads=threads)
        self._outputs = [o.name for o in self._session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray], output_names: list[str] | None = None) -> dict[str, np.ndarray]:
        """Every output (or those named) of one run, by name."""
        names = output_names or self._outputs
        return dict(zip(names, self._session.run(names, feeds), strict=True))

    def info(self) -> dict[str, Any]:
        """Which process this is and the model's interface (for reports and least-loaded routing)."""
        return {"name": self.name, "pid": os.getpid(),
                "inputs": [(i.name, i.shape, i.type) for i in self._session.get_inputs()],
                "outputs": [(o.name, o.shape, o.type) for o in self._session.get_outputs()]}

    def close(self) -> None:
        """Remove the unpacked directory (the loaded library stays mapped until the process exits)."""
        shutil.rmtree(self._directory, ignore_errors=True)
