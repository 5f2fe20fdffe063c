"""Kiln: a deep-learning compiler and inference runtime.

from_onnx(model) -> IRModule; evaluate(mod, feeds) runs it with the reference interpreter.
"""

from kiln import ir  # noqa: F401
from kiln.frontend.onnx import from_onnx
from kiln.runtime.interpreter import evaluate

__version__ = "0.1.0"
__all__ = ["ir", "from_onnx", "evaluate", "__version__"]
