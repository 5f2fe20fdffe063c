"""Dynamic batching: requests for one model with a symbolic first dimension, queued within its batch
delay, run as one: their inputs concatenated along dim 0, the outputs split back by each request's
rows. Row i of a batched output is row i of its own run because the models batched here compute each
row on its own (the first dim is the batch dim of every input and output, checked when the model is
added). Equal up to float rounding, not bit for bit: a symbolic-batch model runs per-shape builds,
and the kernels built for 5 rows may block and vectorize the reductions differently from those for
1 (the tests compare with a relative tolerance of 1e-5)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kiln.runtime.model import Model


def run_batched(model: Model, feeds: list[dict[str, Any]]) -> list[list[np.ndarray]]:
    """Each request's outputs from one run of `model` on their concatenated feeds."""
    if len(feeds) == 1:
        return [model.run(feeds[0])]
    joined = {name: np.concatenate([f[name] for f in feeds]) for name in feeds[0]}
    outs = model.run(joined)
    bounds = np.cumsum([0] + [next(iter(f.values())).shape[0] for f in feeds])
    return [[o[a:b] for o in outs] for a, b in zip(bounds, bounds[1:])]
