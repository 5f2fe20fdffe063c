"""Kiln: a deep-learning compiler and inference runtime.

from_onnx(model) -> IRModule; optimize(mod, opt_level) runs the standard graph passes;
evaluate(mod, feeds) runs a module with the reference interpreter; build(mod) compiles it;
InferenceSession(path_or_model) and load(DIR) run compiled models with onnxruntime's API.
Target.host() is the machine code is built for by default (build(mod, target=...) names another).
configure_runtime(cores=, spin_us=, pin=) sets the process's thread pool, which every session shares.
"""

from kiln import ir  # noqa: F401
from kiln.compiler import build
from kiln.frontend.onnx import from_onnx
from kiln.op.interpreter import evaluate
from kiln.runtime.thread_pool import configure_runtime
from kiln.session import InferenceSession, load
from kiln.target import Target
from kiln.transform.pipeline import optimize
from kiln.version import __version__

__all__ = ["ir", "Target", "from_onnx", "evaluate", "optimize", "build", "InferenceSession", "load",
           "configure_runtime", "__version__"]
