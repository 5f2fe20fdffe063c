"""Code generation: tir -> C (gcc, OpenMP, SIMD), compiled through a content-addressed cache and
loaded with ctypes."""

from kiln.codegen.c_source import CSource, FuncInfo, generate  # noqa: F401
from kiln.codegen.c_types import CodegenError  # noqa: F401
from kiln.codegen.cache import CompileCache  # noqa: F401
from kiln.codegen.compiler import FLAGS, CompileError, CompilerNotFoundError  # noqa: F401
from kiln.codegen.module import CFunction, CModule, KernelError, build  # noqa: F401
