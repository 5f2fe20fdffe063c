"""A loaded kernel library: call its kernels on numpy arrays (kiln.codegen.backends.build_library
renders, compiles and loads one).

Arguments are checked at the boundary (count, dtype, shape against the buffer's static and symbolic
dims, layout), because past it a wrong pointer is silent memory corruption.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from kiln.codegen import loader
from kiln.codegen.c_source import CSource, FuncInfo
from kiln.codegen.c_types import is_float_value
from kiln.codegen.shape_value import shape_value
from kiln.errors import InputError, KernelError
from kiln.ir.dtype import to_numpy
from kiln.tir import expr as E
from kiln.tir.stmt import Buffer


class KilnValue(ctypes.Union):
    """kiln_value_t of the generated module's ABI."""

    _fields_ = [("i", ctypes.c_int64), ("f", ctypes.c_double), ("p", ctypes.c_void_p)]


_KERNEL_ERRORS = {-1: "wrong number of arguments", -2: "out of memory allocating a temporary buffer",
                  -3: "a runtime-library function got an invalid argument",
                  -4: "an index is out of range (a gather or scatter got an index outside [-n, n) of its axis)"}


def kernel_error_text(rc: int) -> str:
    """What a kernel's return code means (KILN_ERR_* of kiln_runtime.h and the runtime library)."""
    return _KERNEL_ERRORS.get(rc, f"error code {rc}")


class CModule:
    def __init__(self, name: str, source: CSource, path: Path):
        self.name, self.source, self.path = name, source, path
        self.lib = loader.load_library(path)

    def get_function(self, name: str) -> CFunction:
        if name not in self.source.functions:
            raise KeyError(f"module {self.name!r} has no function {name!r}; it has {sorted(self.source.functions)}")
        return CFunction(self.source.functions[name], self.lib)

    def __repr__(self) -> str:
        return f"CModule({self.name!r}, functions={sorted(self.source.functions)}, path={str(self.path)!r})"


class CFunction:
    """A kernel callable as f(*arrays_and_scalars) in PrimFunc parameter order."""

    def __init__(self, info: FuncInfo, lib: ctypes.CDLL):
        self.info = info
        self.params = info.func.params
        self._fn = getattr(lib, info.symbol)
        self._fn.argtypes = [ctypes.POINTER(KilnValue), ctypes.c_int32]
        self._fn.restype = ctypes.c_int32

    def __call__(self, *args) -> dict[E.Var, int]:
        """Runs the kernel; returns every size argument's final value (data-dependent dims are
        in-out, see kiln.codegen.runtime_lib)."""
        fname = self.info.func.name
        if len(args) != len(self.params):
            names = ", ".join(p.name for p in self.params)
            raise InputError(f"{fname} takes {len(self.params)} arguments ({names}), got {len(args)}")
        bound: dict[E.Var, int] = {}
        values = (KilnValue * max(len(args), 1))()
        for k, (p, a) in enumerate(zip(self.params, args)):
            if isinstance(p, E.Var):
                values[k] = _scalar(fname, p, a)
                bound[p] = a
        for k, (p, a) in enumerate(zip(self.params, args)):
            if isinstance(p, Buffer):
                _check_array(fname, p, a, bound)
                values[k].p = a.ctypes.data
        rc = self._fn(values, len(args))
        if rc != 0:
            raise KernelError(f"kernel {fname} failed: {kernel_error_text(rc)}")
        return {p: values[k].i for k, p in enumerate(self.params)
                if isinstance(p, E.Var) and not is_float_value(p.dtype)}


def _scalar(fname: str, p: E.Var, a) -> KilnValue:
    if is_float_value(p.dtype):
        if not isinstance(a, (int, float, np.integer, np.floating)) or isinstance(a, bool):
            raise InputError(f"{fname}: scalar {p.name} must be a number ({p.dtype}), got {type(a).__name__}")
        return KilnValue(f=float(a))
    if not isinstance(a, (int, np.integer)):
        raise InputError(f"{fname}: scalar {p.name} must be an integer ({p.dtype}), got {type(a).__name__}")
    return KilnValue(i=int(a))


def _check_array(fname: str, buf: Buffer, a, bound: dict[E.Var, int]) -> None:
    what = f"{fname}: buffer {buf.name}"
    if not isinstance(a, np.ndarray):
        raise InputError(f"{what} must be a numpy array, got {type(a).__name__}")
    want = to_numpy(buf.dtype)
    if a.dtype != want:
        raise InputError(f"{what} must have dtype {buf.dtype} ({want}), got {a.dtype}")
    shape = a.shape
    if len(buf.shape) == 1 and a.ndim != 1 and a.flags.c_contiguous:
        shape = (a.size,)  # a storage-flattened buffer takes any C-contiguous array of its size
    if len(shape) != len(buf.shape):
        raise InputError(f"{what} must have {len(buf.shape)} dims, got shape {a.shape}")
    for axis, (d, n) in enumerate(zip(buf.shape, shape)):
        if isinstance(d, E.Var) and d not in bound:
            bound[d] = n
        expected = shape_value(d, bound)
        if expected is not None and expected != n:
            raise InputError(f"{what} axis {axis} must have size {d} = {expected}, got shape {a.shape}")
    if not a.flags.aligned:
        raise InputError(f"{what} is not aligned to its element size")
    if buf.strides is None:
        if not a.flags.c_contiguous:
            raise InputError(f"{what} must be C-contiguous (use np.ascontiguousarray)")
        return
    for axis, (s, n) in enumerate(zip(buf.strides, a.shape)):
        expected = shape_value(s, bound)
        if n > 1 and expected is not None and expected * a.itemsize != a.strides[axis]:
            raise InputError(f"{what} axis {axis} must have stride {expected} elements, "
                             f"got {a.strides[axis] // a.itemsize}")

