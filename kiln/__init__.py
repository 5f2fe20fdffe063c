"""Kiln: a deep-learning compiler and inference runtime.

from_onnx(model) -> IRModule; optimize(mod, opt_level) runs the standard graph passes;
evaluate(mod, feeds) runs a module with the reference interpreter; build(mod) compiles it;
InferenceSession(path_or_model) and load(DIR) run compiled models with onnxruntime's API.
Target.host() is the machine code is built for by default (build(mod, target=...) names another).
configure_runtime(cores=, spin_us=, pin=) sets the process's thread pool, which every session shares.
quantize(model, out, calibrate=...) writes an int8 (QDQ or dynamic) ONNX model.

Every name is imported on first use (PEP 562): running a compiled model (kiln.load) then imports
only the runtime, not the compiler, its passes, topi or onnx.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from kiln.version import __version__

_WHERE = {"Target": "kiln.target", "from_onnx": "kiln.frontend.onnx",
          "evaluate": "kiln.op.interpreter", "optimize": "kiln.transform.pipeline", "build": "kiln.compiler",
          "InferenceSession": "kiln.session", "load": "kiln.session",
          "configure_runtime": "kiln.runtime.thread_pool", "quantize": "kiln.quantization"}

__all__ = ["ir", "Target", "from_onnx", "evaluate", "optimize", "build", "InferenceSession", "load",
           "configure_runtime", "quantize", "__version__"]

if TYPE_CHECKING:
    from kiln import ir
    from kiln.compiler import build
    from kiln.frontend.onnx import from_onnx
    from kiln.op.interpreter import evaluate
    from kiln.quantization import quantize
    from kiln.runtime.thread_pool import configure_runtime
    from kiln.session import InferenceSession, load
    from kiln.target import Target
    from kiln.transform.pipeline import optimize


def __getattr__(name: str) -> Any:
    """A public name, or a subpackage (kiln.models, kiln.transform, ...), imported on first use."""
    if name == "ir":
        # NOTE: through the package, a parse must find every operator (kiln.ir.op_table is filled by kiln.op)
        importlib.import_module("kiln.op")
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"kiln.{name}") is not None:
        value = importlib.import_module(f"kiln.{name}")
    else:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")
    globals()[name] = value
    return value
