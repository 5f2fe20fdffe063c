"""Code generation: tir -> C (gcc, OpenMP, SIMD), compiled through a content-addressed cache and
loaded with ctypes; each backend behind one interface (kiln.codegen.backend), found by target kind."""

from kiln.codegen.backend import Backend  # noqa: F401
from kiln.codegen.backends import BACKENDS, build_library, get_backend  # noqa: F401
from kiln.codegen.c_backend import CBackend  # noqa: F401
from kiln.codegen.c_source import CSource, FuncInfo, generate  # noqa: F401
from kiln.codegen.c_types import CodegenError  # noqa: F401
from kiln.codegen.cache import CompileCache  # noqa: F401
from kiln.codegen.compiler import FLAGS, CompileError, CompilerNotFoundError  # noqa: F401
from kiln.codegen.module import CFunction, CModule, KernelError  # noqa: F401
