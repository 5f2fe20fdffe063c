"""The standard onnx.backend.base.Backend over Kiln.

`prepare` imports the model once and, by default, compiles it with kiln.build (AOT or the kernel
executor); `prepare(model, executor="interpreter")` runs the reference interpreter instead, which
compiles nothing. `rep.run` executes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from kiln.compiler import build
from kiln.errors import KilnError
from kiln.frontend.onnx import from_onnx
from kiln.op.interpreter import evaluate

EXECUTORS = ("compiled", "interpreter")


class KilnRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, executor: str = "compiled", opt_level: int = 2):
        if executor not in EXECUTORS:
            raise KilnError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
        self.mod = from_onnx(model)
        self.input_names = list(self.mod.input_names)
        self.compiled = build(self.mod, opt_level=opt_level) if executor == "compiled" else None

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs))
        outs = self.compiled.run(feeds) if self.compiled is not None else evaluate(self.mod, feeds)
        return tuple(_plain(v) for v in outs)


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return np.asarray(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


class KilnBackend(Backend):
    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", executor: str = "compiled",
                opt_level: int = 2, **kwargs: Any) -> KilnRep:
        super().prepare(model, device, **kwargs)
        return KilnRep(model, executor, opt_level)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)


prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
supports_device = KilnBackend.supports_device
