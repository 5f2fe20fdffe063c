"""A fused group (a Primitive Function from FuseOps) -> one tir kernel.

Each operator call of the group becomes te computes through the operator library (kiln.topi);
the group is scheduled (the generic schedule unless a target schedule claims it) and lowered to a
PrimFunc. The kernel takes the group's tensor parameters, then the constants it needs as buffers,
then its outputs, then the symbolic dims (bound from the arguments' shapes at run time), so one
kernel serves every input size.
"""

from __future__ import annotations

import numpy as np

from kiln import tir
from kiln.codegen.kernel import Kernel
from kiln.errors import KilnError, LoweringError
from kiln.ir.dtype import from_numpy
from kiln.ir.expr import Call, Constant, Function, Op, Tuple, TupleGetItem, Var, is_absent
from kiln.ir.types import ANY, TensorType, TupleType
from kiln.ir.visitor import post_order
from kiln.op.registry import COMM_REDUCE, OUT_EWISE_FUSABLE, Pattern
from kiln.target import Target, building_for
from kiln.te.lower import create_prim_func
from kiln.te.tensor import Tensor, compute, placeholder
from kiln.tir.transform import lower_passes
from kiln.topi.registry import compute_call
from kiln.topi.schedule_dispatch import schedule_group

# NOTE: kernels keep multi-dim buffers (the C backend computes offsets itself, and the runtime library
# and the call boundary read shapes from the params); the tir vectorize pass still meets index forms
# the C backend rejects, so VECTORIZED loops are left to the compiler (`#pragma omp simd`).
KERNEL_SKIPPED_PASSES = ("storage_flatten", "vectorize")


def _dims(t: TensorType, sizes: dict[str, tir.Var]) -> tuple[tir.PrimExpr, ...]:
    out = []
    for k, d in enumerate(t.shape):
        if isinstance(d, int):
            out.append(tir.IntImm(d))
        elif d == ANY:
            out.append(tir.Var(f"any{len(sizes)}_{k}"))
            sizes[f"?{id(out[-1])}"] = out[-1]
        else:
            out.append(sizes.setdefault(d.name, tir.Var(d.name)))
    return tuple(out)


def _tensor_type(t, where: str) -> TensorType:
    if not isinstance(t, TensorType) or t.shape is None:
        raise LoweringError(f"{where}: only tensors of known rank can be compiled, got {t}")
    return t


def _has_unknown_dim(t) -> bool:
    return isinstance(t, TensorType) and t.shape is not None and any(d == ANY for d in t.shape)


def _constant_tensor(c: Constant, consts: list[tuple[Tensor, np.ndarray]]) -> Tensor:
    """Scalars become immediates inside the kernel; other constants become buffer arguments."""
    data = c.data
    if data.size == 1 and data.dtype.kind in "biuf" and data.dtype.itemsize <= 8:
        value = data.reshape(-1)[0].item()
        dtype = _dtype(data)
        imm = tir.const(value, dtype) if dtype != "bool" else tir.IntImm(int(value), "bool")
        return compute(data.shape, lambda *i: imm, name="const")
    t = placeholder(data.shape, _dtype(data), name=f"const{len(consts)}")
    consts.append((t, np.asarray(data, order="C")))  # ascontiguousarray would make 0-d 1-d
    return t


def _dtype(a: np.ndarray) -> str:
    return from_numpy(a.dtype)


def lower_primitive(fn: Function, name: str, *, passes: bool = True, target: Target | None = None) -> Kernel:
    """Lower one Primitive function to a PrimFunc named `name`, scheduled for `target` (default: the host).
    passes=False stops before the tir passes: the scheduled loop nest as the schedule made it (the tuner's
    cost model reads it)."""
    target = target or Target.host()
    with building_for(target):  # the computes that depend on the machine read it as Target.current()
        return _lower(fn, name, passes, target)


def _lower(fn: Function, name: str, passes: bool, target: Target) -> Kernel:
    sizes: dict[str, tir.Var] = {}
    env: dict[int, object] = {}
    params = []
    for p in fn.params:
        t = _tensor_type(p.type, f"{name} parameter {p.name}")
        ph = placeholder(_dims(t, sizes), t.dtype, name=p.name)
        env[id(p)] = ph
        params.append(ph)
    consts: list[tuple[Tensor, np.ndarray]] = []
    for e in post_order(fn.body):
        if id(e) in env:
            continue
        if isinstance(e, Constant):
            env[id(e)] = _constant_tensor(e, consts)
        elif isinstance(e, Call) and isinstance(e.op, Op):
            if e.op.pattern != Pattern.ELEMWISE and not getattr(e.op, "runtime_dims", False) \
                    and any(_has_unknown_dim(a.type) for a in e.args):
                raise LoweringError(f"{name}: {e.op.name} on dims only known at run time (which of them "
                                    f"broadcast is decided by the data)")
            ins = [None if is_absent(a) else env[id(a)] for a in e.args]
            cvals = [a.data if isinstance(a, Constant) else None for a in e.args]
            try:
                outs = compute_call(e.op.name, e.attrs, ins, e.type, cvals)
            except KilnError as err:
                raise LoweringError(f"{name}: {e.op.name}{f' (node {e.name!r})' if e.name else ''}: {err}") from None
            env[id(e)] = outs if isinstance(e.type, TupleType) else outs[0]
        elif isinstance(e, TupleGetItem):
            env[id(e)] = env[id(e.tuple_value)][e.index]
        elif isinstance(e, Tuple):
            env[id(e)] = tuple(env[id(f)] for f in e.fields) if e.fields else None
        elif isinstance(e, Var):
            raise LoweringError(f"{name}: free variable %{e.name} inside a fused function")
        else:
            raise LoweringError(f"{name}: {type(e).__name__} cannot be part of a kernel")
    result = env[id(fn.body)]
    outputs = list(result) if isinstance(result, tuple) else [result]
    out_types = list(fn.body.type.fields) if isinstance(fn.body.type, TupleType) else [fn.body.type]
    outputs = [_materialize(o, params) for o in outputs]
    sched = schedule_group(outputs, _anchor(fn), target)
    func = create_prim_func(sched, name, inputs=params + [t for t, _ in consts])
    lowered = lower_passes(func, skip=KERNEL_SKIPPED_PASSES) if passes else func
    return Kernel(lowered, [a for _, a in consts], len(params),
                  [_tensor_type(t, name) for t in out_types], func.params)


def _anchor(fn: Function) -> str | None:
    """The operator the group is built around (FuseOps puts at most one such call in a group)."""
    for e in post_order(fn.body):
        if isinstance(e, Call) and getattr(e.op, "pattern", None) in (OUT_EWISE_FUSABLE, COMM_REDUCE):
            return e.op.name
    return None


def _materialize(t: Tensor, params: list[Tensor]) -> Tensor:
    """An output that is a parameter or a constant still needs its own buffer: copy it."""
    if t in params or not hasattr(t.op, "body"):
        return compute(t.shape, lambda *i: t(*i), name=f"{t.name}_copy")
    return t

