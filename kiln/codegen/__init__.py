"""Code generation: tir -> C (gcc, OpenMP, SIMD), compiled through a content-addressed cache and
loaded with ctypes; each backend behind one interface (kiln.codegen.backend), found by target kind.

The names below are imported on first use (PEP 562): running a compiled model needs only the loader
(kiln.codegen.module) and a few small modules, and importing the package must not import the C
generator with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {"Backend": "backend", "BACKENDS": "backends", "build_library": "backends", "get_backend": "backends",
          "CBackend": "c_backend", "CSource": "func_info", "FuncInfo": "func_info", "generate": "c_source",
          "CodegenError": "c_types", "CompileCache": "cache", "FLAGS": "compiler", "CompileError": "compiler",
          "CompilerNotFoundError": "compiler", "CFunction": "module", "CModule": "module", "KernelError": "module"}

__all__ = ["Backend", "BACKENDS", "build_library", "get_backend", "CBackend", "CSource", "FuncInfo", "generate",
           "CodegenError", "CompileCache", "FLAGS", "CompileError", "CompilerNotFoundError", "CFunction", "CModule",
           "KernelError"]

if TYPE_CHECKING:
    from kiln.codegen.backend import Backend
    from kiln.codegen.backends import BACKENDS, build_library, get_backend
    from kiln.codegen.c_backend import CBackend
    from kiln.codegen.c_source import generate
    from kiln.codegen.c_types import CodegenError
    from kiln.codegen.cache import CompileCache
    from kiln.codegen.compiler import FLAGS, CompileError, CompilerNotFoundError
    from kiln.codegen.func_info import CSource, FuncInfo
    from kiln.codegen.module import CFunction, CModule, KernelError


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'kiln.codegen' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"kiln.codegen.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
