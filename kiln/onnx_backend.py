"""The standard onnx.backend.base.Backend over Kiln's best executor (today the interpreter).

`prepare` imports the model once; `rep.run` executes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from kiln.frontend.onnx import from_onnx
from kiln.runtime.interpreter import evaluate


class KilnRep(BackendRep):
    def __init__(self, model: onnx.ModelProto):
        self.mod = from_onnx(model)
        self.input_names = list(self.mod.input_names)

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs))
        return tuple(_plain(v) for v in evaluate(self.mod, feeds))


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
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> KilnRep:
        super().prepare(model, device, **kwargs)
        return KilnRep(model)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)


prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
supports_device = KilnBackend.supports_device
