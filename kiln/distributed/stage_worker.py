"""The object a pipeline stage's Ray actor holds: one compiled stage that takes the previous stage's values.

`step` receives the dict the previous stage returned (Ray resolves that ObjectRef on this node;
the driver never fetches it), runs the stage on its inputs and returns its results with the values
it forwards, so the next stage's call takes this call's ObjectRef alone. It counts the bytes it
receives and hands on, for the pipeline's report and benchmark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kiln.distributed.bundle import Bundle
from kiln.distributed.model_worker import ModelWorker
from kiln.errors import KilnError


class StageWorker(ModelWorker):
    """Stage `index` loaded from its bundle; `inputs` it reads and `forward` it passes on, by name."""

    def __init__(self, bundle: Bundle, threads: int | None, index: int, inputs: Sequence[str],
                 forward: Sequence[str]) -> None:
        super().__init__(bundle, threads=threads, name=f"stage {index}")
        self.index = index
        self._inputs = tuple(inputs)
        self._forward = tuple(forward)
        self._counts = {"requests": 0, "bytes_in": 0, "bytes_out": 0}

    def step(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """This stage on one request's values."""
        out = stage_step(self.index, self._inputs, self._forward, self.run, values)
        self._counts["requests"] += 1
        self._counts["bytes_in"] += sum(np.asarray(v).nbytes for v in values.values())
        self._counts["bytes_out"] += sum(np.asarray(v).nbytes for v in out.values())
        return out

    def info(self) -> dict[str, Any]:
        """ModelWorker's info, with the node this stage runs on (where a SPREAD placement put it)."""
        import ray

        return {**super().info(), "node": ray.get_runtime_context().get_node_id()}

    def counts(self) -> dict[str, int]:
        """Requests this process has run and the bytes it received and handed on (since its last start)."""
        return dict(self._counts)


def stage_step(index: int, inputs: Sequence[str], forward: Sequence[str],
               run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
               values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Stage `index` on the dict of values it receives: its results (`run` on its inputs) and the values it forwards."""
    missing = [n for n in inputs if n not in values]
    if missing:
        raise KilnError(f"stage {index} needs the values {missing}, which it did not receive")
    return {**{n: values[n] for n in forward}, **run({n: values[n] for n in inputs})}
