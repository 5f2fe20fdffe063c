"""A compiled kernel's calling convention as JSON, so a saved library can be called again.

A loaded library needs only each kernel's parameters (buffers with shape expressions over the
symbolic dims, then the scalars) to check arguments and bind sizes; its loops live in the .so.
Shape expressions use the arithmetic the executor can evaluate: ints, dims, + - * // % min max.
"""

from __future__ import annotations

from typing import Any

from kiln.errors import ArtifactError  # noqa: F401  (re-exported)
from kiln.tir import expr as E
from kiln.tir.stmt import Buffer, Evaluate, PrimFunc

_OPS: dict[type, str] = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.FloorDiv: "//", E.FloorMod: "%",
                         E.Min: "min", E.Max: "max"}
_CLASSES = {v: k for k, v in _OPS.items()}


def encode_params(func: PrimFunc) -> list[dict[str, Any]]:
    names: dict[str, E.Var] = {}

    def expr(e: E.PrimExpr) -> Any:
        if isinstance(e, E.IntImm):
            return e.value
        if isinstance(e, E.Var):
            if names.setdefault(e.name, e) is not e:
                raise ArtifactError(f"kernel {func.name}: two size variables are named {e.name!r}")
            return e.name
        if type(e) in _OPS:
            return [_OPS[type(e)], expr(e.a), expr(e.b)]
        raise ArtifactError(f"kernel {func.name}: cannot save the shape expression {e!r}")

    out = []
    for p in func.params:
        if isinstance(p, Buffer):
            out.append({"buffer": p.name, "dtype": p.dtype, "shape": [expr(d) for d in p.shape],
                        "strides": None if p.strides is None else [expr(s) for s in p.strides]})
        else:
            expr(p)
            out.append({"scalar": p.name, "dtype": p.dtype})
    return out


def decode_signature(name: str, params: list[dict[str, Any]]) -> PrimFunc:
    """A PrimFunc that carries only the parameters: enough to call the kernel in a loaded library."""
    names = {p["scalar"]: E.Var(p["scalar"], p["dtype"]) for p in params if "scalar" in p}

    def expr(x: Any) -> E.PrimExpr:
        if isinstance(x, bool) or not isinstance(x, (int, str, list)):
            raise ArtifactError(f"kernel {name}: bad shape expression {x!r}")
        if isinstance(x, int):
            return E.IntImm(x)
        if isinstance(x, str):
            return names.setdefault(x, E.Var(x))
        if len(x) != 3 or x[0] not in _CLASSES:
            raise ArtifactError(f"kernel {name}: bad shape expression {x!r}")
        return _CLASSES[x[0]](expr(x[1]), expr(x[2]))

    out: list[Buffer | E.Var] = []
    for p in params:
        if "scalar" in p:
            out.append(names[p["scalar"]])
        else:
            strides = None if p["strides"] is None else tuple(expr(s) for s in p["strides"])
            out.append(Buffer(p["buffer"], tuple(expr(d) for d in p["shape"]), p["dtype"], strides))
    return PrimFunc(name, tuple(out), Evaluate(E.IntImm(0)), (("signature_only", True),))
