"""A model as a dispatcher serves it: the model, its config, and the checks a request gets before it
is queued, so that a malformed request fails alone instead of inside a batch or a run with others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.errors import InputError, ServeError
from kiln.ir.input_check import check_input
from kiln.serve.dispatch import InferRequest, ModelConfig, Priority

if TYPE_CHECKING:
    from kiln.ir.types import Type
    from kiln.runtime.model import Model


@dataclass(frozen=True, eq=False)
class Served:
    """One model under one name; queued requests keep the Served they arrived for, so a model
    replaced under the same name finishes its queue on the old one."""

    name: str
    model: Model
    config: ModelConfig
    types: dict[str, Type]  # each input's declared type, in parameter order (read once: a submit checks against them)
    output_names: tuple[str, ...]
    batchable: bool  # max_batch > 0 (`served` checked that every input and output has a symbolic first dim)

    def priority(self, request: InferRequest) -> Priority:
        """The request's own priority where it has one, else the model's."""
        return request.priority or self.config.priority

    def timeout(self, request: InferRequest) -> float | None:
        """The shorter of the request's and the model's timeouts (None: no limit)."""
        limits = [t for t in (request.timeout_s, self.config.timeout_s) if t is not None]
        return min(limits) if limits else None

    def check(self, request: InferRequest) -> dict[str, Any]:
        """The feeds as the model takes them; InputError naming the input or output that is wrong."""
        unknown = [n for n in request.feeds if n not in self.types]
        if unknown:
            raise InputError(f"model '{self.name}' has no input '{unknown[0]}' (inputs: {', '.join(self.types)})")
        dims: dict[str, int] = {}
        feeds = {}
        for name, t in self.types.items():
            if name not in request.feeds:
                raise InputError(f"model '{self.name}': input '{name}' is missing")
            feeds[name] = check_input(name, request.feeds[name], t, dims)
        for out in request.outputs or ():
            if out not in self.output_names:
                raise InputError(f"model '{self.name}' has no output '{out}' (outputs: {', '.join(self.output_names)})")
        return feeds

    def answer(self, request: InferRequest, outputs: list[np.ndarray]) -> dict[str, np.ndarray]:
        """{output name: array} for the outputs the request asked for (all when it named none)."""
        named = dict(zip(self.output_names, outputs))
        return {n: named[n] for n in request.outputs} if request.outputs else named


def symbolic_batch(model: Model) -> bool:
    """Every input and output of `model` has a symbolic first dim (rows can be concatenated and split)."""
    tensors = model.inputs + model.outputs
    return all(t.shape and isinstance(t.shape[0], str) for t in tensors)


def served(name: str, model: Model, config: ModelConfig) -> Served:
    """A Served, or ServeError naming the setting that cannot apply to this model."""
    if config.max_batch < 0 or config.batch_delay_us < 0 or config.queue_limit < 1:
        raise ServeError(f"model '{name}': max_batch and batch_delay_us must be >= 0 and queue_limit >= 1 "
                         f"(got {config.max_batch}, {config.batch_delay_us}, {config.queue_limit})")
    if config.cores is not None and config.cores < 1:
        raise ServeError(f"model '{name}': cores={config.cores}; expected a positive number or none")
    if config.max_batch > 0 and not symbolic_batch(model):
        raise ServeError(f"model '{name}': max_batch={config.max_batch} needs a symbolic first dimension on "
                         "every input and output (dynamic batching concatenates requests along it)")
    return Served(name, model, config, {p.name: p.type for p in model.mod.input_vars},
                  tuple(o.name for o in model.outputs), config.max_batch > 0)
