"""PackDense: a matrix product with a constant 2-D B becomes `linalg.dense_packed` over B packed
once, at compile time, into column panels [N/nr, K, nr] (zero-padded past N).

The x86 dense schedule walks B one nr-wide panel at a time, so reading it in panel order is
contiguous whatever B's original layout (Gemm's transB reads it across rows). Gemm's alpha, beta
and C become elementwise ops after the product, which FuseOps fuses into its store.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from kiln.ir.expr import Call, Constant, Expr, Function, is_absent
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import rewrite
from kiln.op.registry import OpDef, get_op
from kiln.transform.infra import PassContext, function_pass
from kiln.transform.layout_rules import transform

PACK_DTYPES = ("float32", "float64")
VECTORS_PER_PANEL = 2  # nr = two SIMD vectors: a 6 x nr tile then holds 12 vector accumulators


@functools.lru_cache(maxsize=1)
def host_vector_bytes() -> int:
    """The SIMD width gcc's -march=native will use on this machine: 64 with AVX-512, else 32."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return 64 if "avx512f" in line.split() else 32
    except OSError:
        pass
    return 32


def host_vector_registers() -> int:
    """Vector registers gcc can allocate on this machine: 32 with AVX-512 (zmm0-31), else 16 (ymm0-15).
    A register tile's accumulators, weights and broadcasts must fit in them, or gcc spills to the stack."""
    return 32 if host_vector_bytes() >= 64 else 16


@functools.lru_cache(maxsize=1)
def host_l2_bytes() -> int:
    """One core's L2 cache (sysfs), or 1 MiB when the host does not say: what a schedule can expect to
    stay cached between two passes over a tensor."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in sorted(os.listdir(base)):
            d = os.path.join(base, index)
            with open(os.path.join(d, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(d, "size")) as f:
                size = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
            return int(size.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return 1 << 20


def panel_width(dtype: str, ctx: PassContext) -> int:
    """nr: PassContext.config["pack_dense.nr"] when given, else two host vectors of `dtype`."""
    given = ctx.config.get("pack_dense.nr")
    if given is not None:
        return int(given)
    return VECTORS_PER_PANEL * host_vector_bytes() // (4 if dtype == "float32" else 8)


def _static_2d(e: Expr) -> tuple[int, int] | None:
    t = e.type
    if not (isinstance(e, Constant) and isinstance(t, TensorType) and t.shape is not None and len(t.shape) == 2):
        return None
    return t.shape  # type: ignore[return-value]


def _packable(call: Call) -> bool:
    t, a = call.type, call.args[0].type
    return (isinstance(t, TensorType) and t.dtype in PACK_DTYPES and isinstance(a, TensorType)
            and a.dtype == t.dtype and a.shape is not None and len(a.shape) >= 2)


def pack_mat_mul(call: Call, nr: int) -> Expr | None:
    b = call.args[1]
    shape = _static_2d(b)
    if shape is None or not _packable(call):
        return None
    return get_op("linalg.dense_packed")(call.args[0], transform(b, "IO", f"OI{nr}o"), units=shape[1])


def pack_gemm(call: Call, nr: int) -> Expr | None:
    a = call.attrs
    b = call.args[1]
    shape = _static_2d(b)
    if shape is None or a.transA or not _packable(call):
        return None
    units = shape[0] if a.transB else shape[1]
    y = get_op("linalg.dense_packed")(call.args[0], transform(b, "OI" if a.transB else "IO", f"OI{nr}o"),
                                      units=units)
    dtype = call.type.dtype  # type: ignore[union-attr]
    if a.alpha != 1.0:
        y = get_op("math.mul")(y, Constant(_scalar(a.alpha, dtype)))
    c = call.args[2] if len(call.args) > 2 else None
    if c is not None and not is_absent(c):
        if a.beta != 1.0:
            c = get_op("math.mul")(c, Constant(_scalar(a.beta, dtype)))
        y = get_op("math.add")(y, c)
    return y


def _scalar(v: float, dtype: str) -> np.ndarray:
    return np.asarray(v, dtype=dtype)


# op name -> rewrite of a call of it, given the panel width
PACK_DENSE_RULES = {"linalg.mat_mul": pack_mat_mul, "linalg.gemm": pack_gemm}


@function_pass("pack-dense", opt_level=2, config=("pack_dense.nr",))
def pack_dense(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """mat_mul/gemm with a constant 2-D B (float32/float64) -> dense_packed over the panel-packed B."""

    def post(old: Expr, new: Expr) -> Expr:
        if not (isinstance(new, Call) and isinstance(new.op, OpDef)):
            return new
        rule = PACK_DENSE_RULES.get(new.op.name)
        if rule is None or not isinstance(new.type, TensorType):
            return new
        out = rule(new, panel_width(new.type.dtype, ctx))
        return new if out is None else out

    return rewrite(fn, post)
