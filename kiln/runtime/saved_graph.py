"""A loaded model's fused graph, parsed when first read (issue 35: an AOT model starts without it).

An AOT artifact's run needs its library, its weights and its inputs and outputs, all of which model.json
holds without the graph. The graph text is needed only by the graph executor's view of the library
(`export`), `kiln show`, and whoever walks `model.mod`; parsing it imports every operator record and
runs type inference over the whole graph, most of a resnet50 load. `SavedGraph` is the IRModule such a
model holds: its inputs and outputs come from the saved interface, everything else from the parse,
made once, on first use, from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kiln.ir.expr import Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, Type

if TYPE_CHECKING:
    from kiln.runtime.executor import GraphExecutor


class SavedGraph(IRModule):
    """An IRModule whose `functions` and `metadata` are parsed from the artifact when first read."""

    def __init__(self, inputs: tuple[Var, ...], outputs: tuple[Type, ...], output_names: tuple[str, ...],
                 parse: Callable[[], GraphExecutor]):
        object.__setattr__(self, "output_names", output_names)
        object.__setattr__(self, "_inputs", inputs)
        object.__setattr__(self, "_outputs", outputs)
        object.__setattr__(self, "_parse", parse)
        object.__setattr__(self, "_executor", None)
        object.__setattr__(self, "_lock", threading.Lock())

    def executor(self) -> GraphExecutor:
        """The graph executor over the parsed graph (the kernel-by-kernel view of the library)."""
        with self._lock:
            if self._executor is None:
                object.__setattr__(self, "_executor", self._parse())
            return self._executor

    def __getattr__(self, name: str) -> Any:
        """Only reached for what __init__ did not set: the parsed module's fields."""
        if name not in ("functions", "metadata"):
            raise AttributeError(name)
        return getattr(self.executor().mod, name)

    @property
    def input_vars(self) -> tuple[Var, ...]:
        return self._inputs

    @property
    def output_types(self) -> tuple[Type, ...]:
        return self._outputs


def saved_interface(meta: dict[str, Any]) -> tuple[tuple[Var, ...], tuple[Type, ...]] | None:
    """The inputs and output types model.json records (`Model.export`'s "inputs" and "outputs"); None
    when one is not a tensor of static shape (its type then comes from the graph)."""
    try:
        inputs = tuple(Var(str(i["name"]), _tensor_type(i)) for i in meta["inputs"])
        outputs = tuple(_tensor_type(o) for o in meta["outputs"])
    except (KeyError, TypeError, ValueError):
        return None
    return inputs, outputs


def _tensor_type(info: dict[str, Any]) -> TensorType:
    shape = info["shape"]
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise ValueError(f"{info['name']}: dims {shape} are not all known")
    return TensorType(tuple(shape), str(info["dtype"]))
