"""Kiln's C runtime library: operators that are not loop nests (top-k, unique, non-zero, NMS).

te lowers an ExternOp to `Evaluate(Call(func, in_buffers..., out_buffers..., scalars...))`; for a
`func` named in RUNTIME_FUNCS the C backend spells that as a call passing each buffer as a
`kiln_tensor_t` (data, shape, ndim, dtype) and every scalar as int64_t, and pastes the C sources
the module uses (kiln_rt.h, argsort.c, then one file per function) after kiln_runtime.h.

Data-dependent output sizes (the number of unique values, of non-zeros, of kept boxes, a
non-constant K) travel through the kernel's own size arguments. Such a dim is a bare Var among
the kernel's scalar parameters, bound by no input shape. The contract for whoever calls the kernel
(the executor):

1. pass, in that Var's argument slot, the dim's capacity (`capacities(func, bound)`, an upper
   bound computed from the input shapes) and allocate every output using that value;
2. after the call the same slot holds the actual extent (the slot is in-out; CFunction returns the
   final value of every scalar slot);
3. each output was written C-contiguous in its actual shape at the start of its buffer:
   `out.reshape(-1)[:prod(actual)].reshape(actual)` (`trim`).
`call` does all three for one kernel. Inside the kernel, code after the call already sees the
actual extents.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kiln.codegen.shape_value import shape_value
from kiln.errors import CodegenError
from kiln.ir.sizes import check_alloc
from kiln.tir import expr as E
from kiln.tir.functor import walk
from kiln.tir.stmt import Buffer, Evaluate, PrimFunc

_DIR = Path(__file__).parent

DTYPE_CODES = {
    "bool": "KILN_DT_BOOL", "int8": "KILN_DT_INT8", "int16": "KILN_DT_INT16", "int32": "KILN_DT_INT32",
    "int64": "KILN_DT_INT64", "uint8": "KILN_DT_UINT8", "uint16": "KILN_DT_UINT16", "uint32": "KILN_DT_UINT32",
    "uint64": "KILN_DT_UINT64", "float16": "KILN_DT_FLOAT16", "bfloat16": "KILN_DT_BFLOAT16",
    "float32": "KILN_DT_FLOAT32", "float64": "KILN_DT_FLOAT64",
}

Shapes = Sequence[Sequence[int]]


@dataclass(frozen=True)
class RuntimeFunc:
    """A C runtime function: its source file, arity, and which output axes are data-dependent.
    `dynamic(scalars)` lists (output, axis); `capacity(input shapes, scalars)` bounds their extent."""

    file: str
    num_inputs: int
    num_outputs: int
    dynamic: Callable[[Sequence[int]], list[tuple[int, int]]]
    capacity: Callable[[Shapes, Sequence[int]], int]


def _unique_dynamic(s: Sequence[int]) -> list[tuple[int, int]]:
    return [(0, s[0] if s[1] else 0), (1, 0), (3, 0)]


RUNTIME_FUNCS: dict[str, RuntimeFunc] = {
    "kiln_top_k": RuntimeFunc("top_k.c", 2, 2, lambda s: [(0, s[0]), (1, s[0])], lambda sh, s: sh[0][s[0]]),
    "kiln_unique": RuntimeFunc("unique.c", 1, 4, _unique_dynamic,
                               lambda sh, s: sh[0][s[0]] if s[1] else math.prod(sh[0])),
    "kiln_non_zero": RuntimeFunc("non_zero.c", 1, 1, lambda s: [(0, 1)], lambda sh, s: math.prod(sh[0])),
    "kiln_non_max_suppression": RuntimeFunc("non_max_suppression.c", 5, 1, lambda s: [(0, 0)],
                                            lambda sh, s: math.prod(sh[1])),
    "kiln_det": RuntimeFunc("det.c", 1, 1, lambda s: [], lambda sh, s: 0),
    "kiln_dropout": RuntimeFunc("dropout.c", 3, 2, lambda s: [], lambda sh, s: 0),
    "kiln_linear_attention": RuntimeFunc("linear_attention.c", 6, 2, lambda s: [], lambda sh, s: 0),
}


# ---------------------------------------------------------------------------------------------
# finding runtime calls in tir


def runtime_calls(func: PrimFunc) -> list[E.Call]:
    return [n.value for n in walk(func.body)
            if isinstance(n, Evaluate) and isinstance(n.value, E.Call) and n.value.name in RUNTIME_FUNCS]


def _split(call: E.Call) -> tuple[RuntimeFunc, list[Buffer], list[Buffer], list[int]]:
    """(spec, input buffers, output buffers, scalars as ints) of a runtime call."""
    spec = RUNTIME_FUNCS[call.name]
    nb = spec.num_inputs + spec.num_outputs
    bufs, rest = list(call.args[:nb]), call.args[nb:]
    if len(bufs) != nb or not all(isinstance(b, Buffer) for b in bufs):
        raise CodegenError(f"{call.name} takes {spec.num_inputs} input and {spec.num_outputs} output buffers")
    if not all(isinstance(s, E.IntImm) for s in rest):
        raise CodegenError(f"{call.name}: scalar arguments must be integer constants, got {rest}")
    return spec, bufs[:spec.num_inputs], bufs[spec.num_inputs:], [s.value for s in rest]


def _dynamic_dims(call: E.Call) -> list[tuple[int, int, E.Var]]:
    """(output, axis, Var) of each data-dependent output dim that is a bare Var."""
    spec, _, outs, scalars = _split(call)
    return [(k, a, outs[k].shape[a]) for k, a in spec.dynamic(scalars) if isinstance(outs[k].shape[a], E.Var)]


def data_dependent_vars(func: PrimFunc) -> list[E.Var]:
    """The scalar parameters of `func` that its runtime calls set (in-out size arguments)."""
    found = {v for c in runtime_calls(func) for _, _, v in _dynamic_dims(c)}
    return [p for p in func.params if isinstance(p, E.Var) and p in found]


def capacities(func: PrimFunc, bound: dict[E.Var, int]) -> dict[E.Var, int]:
    """An upper bound for each data-dependent dim of `func`, given the values of the size Vars
    bound by the input shapes."""
    out: dict[E.Var, int] = {}
    for call in runtime_calls(func):
        spec, ins, _, scalars = _split(call)
        shapes = [[shape_value(d, bound) for d in b.shape] for b in ins]
        for _, _, v in _dynamic_dims(call):
            out[v] = max(out.get(v, 0), int(spec.capacity(shapes, scalars)))
    return out


def trim(out: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The actual output inside a buffer allocated at capacity (see the module docstring)."""
    return out.reshape(-1)[:math.prod(shape)].reshape(tuple(shape))


def call(fn, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run kernel `fn` (a CFunction whose buffer params are `inputs`, then its outputs) by the
    contract above: sizes bound from the inputs, data-dependent ones at capacity, outputs trimmed."""
    from kiln.ir.dtype import to_numpy

    params = fn.info.func.params
    bufs = [p for p in params if isinstance(p, Buffer)]
    bound: dict[E.Var, int] = {}
    for b, a in zip(bufs, inputs):
        for d, n in zip(b.shape, a.shape):
            if isinstance(d, E.Var):
                bound.setdefault(d, n)
    bound.update(capacities(fn.info.func, bound))
    shapes = [[shape_value(d, bound) for d in b.shape] for b in bufs[len(inputs):]]
    for i, (shape, b) in enumerate(zip(shapes, bufs[len(inputs):])):  # capacities grow with the inputs
        check_alloc(f"output {i} of {fn.info.func.name}", shape, b.dtype)
    outs = [np.empty(shape, to_numpy(b.dtype)) for shape, b in zip(shapes, bufs[len(inputs):])]
    sizes = fn(*inputs, *outs, *(bound[p] for p in params if isinstance(p, E.Var)))
    return [trim(o, [shape_value(d, sizes) for d in b.shape]) for o, b in zip(outs, bufs[len(inputs):])]


# ---------------------------------------------------------------------------------------------
# C


def source(funcs: Iterable[PrimFunc]) -> str:
    """The runtime C the module's functions call ("" when they call none)."""
    files = sorted({RUNTIME_FUNCS[c.name].file for f in funcs for c in runtime_calls(f)})
    if not files:
        return ""
    return "\n".join((_DIR / name).read_text() for name in ["kiln_rt.h", "argsort.c", *files])


def emit_call(p, call: E.Call, error_flag: str) -> None:
    """Spell one runtime call with printer `p` (a codegen FunctionPrinter): descriptors, the call,
    its error code into `error_flag`, then the actual extents of data-dependent dims."""
    _, ins, outs, scalars = _split(call)
    p.emit("{")
    p.depth += 1
    descs, shapes = [], []
    for b in ins + outs:
        shape, desc = p.tmp(), p.tmp()
        dims = ", ".join(f"(int64_t)({p.expr(d)})" for d in b.shape) or "0"
        code = DTYPE_CODES.get(E.elem_of(b.dtype))
        if code is None:
            raise CodegenError(f"{call.name}: the runtime library has no dtype {b.dtype!r}")
        p.emit(f"int64_t {shape}[{max(len(b.shape), 1)}] = {{{dims}}};")
        p.emit(f"kiln_tensor_t {desc} = {{(void*){p.buffer(b)}, {shape}, {len(b.shape)}, {code}}};")
        descs.append(desc)
        shapes.append(shape)
    rc = p.tmp()
    args = ", ".join([f"&{d}" for d in descs] + [f"(int64_t){s}" for s in scalars])
    p.emit(f"int32_t {rc} = {call.name}({args});")
    p.emit(f"if ({rc} != KILN_OK) __atomic_store_n(&{error_flag}, {rc}, __ATOMIC_RELAXED);")
    for k, a, v in _dynamic_dims(call):
        p.emit(f"{p.var(v)} = ({p.ctype(v.dtype)}){shapes[len(ins) + k]}[{a}];")
    p.depth -= 1
    p.emit("}")
