"""Run one operator's te compute on numpy inputs and compare with its numpy reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import kiln.topi  # noqa: F401
from kiln import te
from kiln.ir import dtype as dt
from kiln.ir.expr import Call, Constant, Var, absent
from kiln.ir.types import TensorType
from kiln.op import get_op
from kiln.te.eval import evaluate
from kiln.topi import compute_call

RTOL = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5, "float64": 1e-10}


def run_compute(name: str, attrs: Any, arrays: Sequence[np.ndarray | None], const: Sequence[int] = ()):
    """Outputs of the compute (inputs in `const` also reach it as constants) and of the reference."""
    op = get_op(name)
    args = [absent() if a is None else Constant(a) if k in const else Var(f"x{k}", TensorType(a.shape, dt.from_numpy(a.dtype)))
            for k, a in enumerate(arrays)]
    out_type = Call(op, args, attrs).type
    ins = [None if a is None else te.placeholder(a.shape, dt.from_numpy(a.dtype), f"x{k}") for k, a in enumerate(arrays)]
    consts = [a if k in const else None for k, a in enumerate(arrays)]
    outs = compute_call(name, attrs, ins, out_type, consts)
    with np.errstate(all="ignore"):
        got = evaluate(list(outs), {t: a for t, a in zip(ins, arrays) if t is not None})
        ref = op.reference(attrs, *arrays)
    return got, list(ref) if isinstance(ref, tuple) else [ref]


def check(name: str, attrs: Any, arrays: Sequence[np.ndarray | None], const: Sequence[int] = (),
          outputs: int | None = None) -> None:
    got, ref = run_compute(name, attrs, arrays, const)
    n = len(ref) if outputs is None else outputs
    for k, (g, r) in enumerate(zip(got[:n], ref[:n])):
        r = np.asarray(r)
        where = f"{name} output {k} ({attrs}, inputs {[None if a is None else (a.shape, a.dtype) for a in arrays]})"
        assert g.shape == r.shape and g.dtype == r.dtype, f"{where}: got {g.shape} {g.dtype}, want {r.shape} {r.dtype}"
        name_ = dt.from_numpy(r.dtype)
        if name_ in RTOL:
            r64 = r.astype(np.float64)
            finite = np.abs(r64[np.isfinite(r64)])
            scale = max(1.0, float(finite.max())) if finite.size else 1.0  # cancellation near zero
            np.testing.assert_allclose(g.astype(np.float64), r64, rtol=RTOL[name_], atol=RTOL[name_] * scale,
                                       equal_nan=True, err_msg=where)
        else:
            np.testing.assert_array_equal(g, r, err_msg=where)


def rand(shape: Sequence[int], dtype: str, rng: np.random.Generator, lo: int = -20, hi: int = 20) -> np.ndarray:
    """Random values of a dtype: normal*3 floats, ints in [lo, hi] (unsigned from 0), random bools."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    npd = dt.to_numpy(dtype)
    if dt.is_float(dtype):
        return (rng.standard_normal(shape) * 3).astype(npd)
    lo = max(lo, 0) if dtype.startswith("u") else lo
    return rng.integers(lo, hi + 1, size=shape).astype(npd)
