"""Build one operator call with the compiled executor and compare it with the operator's numpy
reference: the shared harness of the attention-family tests (cache, linear attention, causal conv)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kiln.compiler.lower import build_graph_executor as build
from kiln.ir import IRModule
from kiln.ir.dtype import from_numpy
from kiln.ir.types import SizeVar
from kiln.op import get_op
from kiln.runtime.executor import GraphExecutor
from tests.helpers import one_op_module

TOL = {"float64": 1e-9, "float32": 2e-5, "float16": 2e-3, "bfloat16": 1e-2}


def op_module(name: str, arrays: Sequence[np.ndarray | None], dims: dict[tuple[int, int], str] | None = None,
              **attrs) -> IRModule:
    """main(inputs) = name(inputs, **attrs); `dims` makes dim (input, axis) the symbolic dim of that name."""
    dims = dims or {}
    return one_op_module(name, arrays, dim=lambda k, ax: SizeVar(dims[k, ax]) if (k, ax) in dims else None, **attrs)


def run_compiled(mod: IRModule, arrays_list: Sequence[Sequence[np.ndarray | None]], name: str,
                 host_ok: bool = False, **attrs) -> GraphExecutor:
    """Build `mod` once, run it on each input set and check every output against the reference."""
    cm = build(mod)
    if not host_ok:
        assert cm.host_groups == [], cm.host_groups
    op = get_op(name)
    for arrays in arrays_list:
        given = [a for a in arrays if a is not None]
        got = cm.run({p.name: a for p, a in zip(mod.main.params, given)})
        with np.errstate(all="ignore"):
            want = op.reference(op.attrs_type(**attrs), *arrays)
        want = list(want) if isinstance(want, tuple) else [want]
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, g.dtype, w.shape, w.dtype)
            tol = TOL[from_numpy(w.dtype)]
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol,
                                       err_msg=f"{name} output {k}")
    if not host_ok:
        assert cm.ran_on_host == {}, cm.ran_on_host
    return cm
