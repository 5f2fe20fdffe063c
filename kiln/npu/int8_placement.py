"""The int8 rule of op-to-device mapping: which groups of a QDQ model run on the accelerator in integers.

A group is DequantizeLinear(x) -> conv / gemm / matmul (int8 weights, see int8_weights.py, an optional
float bias) -> relu / clip ... -> QuantizeLinear, with per-tensor uint8 or int8 activations; behind it
the requantizations DequantizeLinear -> [add of another DequantizeLinear: a residual, at most one per
group] -> relu / clip ... -> QuantizeLinear that single-user chains add (a quantizer that observes both a
conv's and its relu's outputs writes such pairs; QLinearAdd-style adds follow a block's last conv). A max pool between a
DequantizeLinear and a QuantizeLinear of one scale and zero point is a pool on int8 values. The matrix
unit accumulates int8 x int8 in int32; the vector unit requantizes (int8_lowering.py). On the device a
uint8 tensor is held as int8, shifted by -128 (its zero point too), so one int8 path serves both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln.ir.expr import Call, Constant, Expr, TupleGetItem, is_absent
from kiln.ir.types import TensorType
from kiln.npu.int8_weights import Int8Weight, Int8Weights
from kiln.npu.placement import Step

QUANT_DTYPES = {"uint8": -128, "int8": 0}  # the activation type -> the shift of its device (int8) values


@dataclass(frozen=True)
class ActQuant:
    """A per-tensor activation quantization: `zero_point` already shifted into the device's int8 domain."""

    scale: float
    zero_point: int


@dataclass(frozen=True)
class Residual:
    """The other addend of a residual add: the quantized tensor `source` and its DequantizeLinear's `quant`."""

    source: Expr
    quant: ActQuant
    dequantize: Call  # the DequantizeLinear of `source`
    add: Call


@dataclass
class Int8Step(Step):
    """An accelerator step computed in integers: `kind` conv, dense or pool; `x` the anchor input's
    quantization, `weight` its int8 weights; `stages` the vector unit's ops after the accumulation:
    ("max" / "min", float bound), ("q", ActQuant) a QuantizeLinear, ("dq", ActQuant) a DequantizeLinear,
    ("add", Residual) the addition of another dequantized tensor (at most one per step)."""

    kind: str = "conv"
    x: ActQuant | None = None
    weight: Int8Weight | None = None
    stages: list[tuple[str, object]] = field(default_factory=list)

    @property
    def source(self) -> Expr:
        """The quantized tensor the step reads (its input DequantizeLinear's argument)."""
        return self.anchor.args[0].args[0]


def int8_steps(order: list[Call], users: dict[int, list[Expr]], weights: Int8Weights) -> list[Step]:
    """The int8 steps among `order` (calls in post order), each with the input DequantizeLinear calls no
    one else reads hidden (never computed)."""
    steps: list[Step] = []
    taken: set[int] = set()
    for call in order:
        step = _pool_step(call, users) or _matrix_step(call, users, weights, taken)
        if step is not None:
            steps.append(step)
            taken.update(id(c) for c in step.calls)
    _hide_dequantizations(steps, users)
    return steps


def _hide_dequantizations(steps: list[Step], users: dict[int, list[Expr]]) -> None:
    """Hide each DequantizeLinear that only int8 steps read, all of them reading its quantized input
    instead (as a layer's input or a residual): it is never computed."""
    readers: dict[int, tuple[Call, Step, set[int]]] = {}  # id(dq) -> (dq, a step reading it, the calls that do)
    for s in steps:
        pairs = [(s.anchor.args[0], s.anchor)] + [(r.dequantize, r.add) for k, r in s.stages if k == "add"]
        for dq, reader in pairs:
            readers.setdefault(id(dq), (dq, s, set()))[2].add(id(reader))
    for dq, step, by in readers.values():
        if all(id(u) in by for u in users.get(id(dq), [])):
            step.hidden.append(dq)


def act_quant(call: Expr, op: str) -> ActQuant | None:
    """The scalar scale and shifted zero point of a Quantize/DequantizeLinear `call` of uint8 / int8."""
    if not (isinstance(call, Call) and getattr(call.op, "name", None) == op and call.attrs.block_size == 0
            and getattr(call.attrs, "precision", None) in (None, "float32")
            and getattr(call.attrs, "output_dtype", None) in (None, "float32", *QUANT_DTYPES)):
        return None
    quantized = (call if op == "quant.quantize_linear" else call.args[0]).type
    if not (isinstance(quantized, TensorType) and quantized.dtype in QUANT_DTYPES and quantized.is_static):
        return None
    scale = call.args[1]
    zp = call.args[2] if len(call.args) > 2 and not is_absent(call.args[2]) else None
    if not (isinstance(scale, Constant) and scale.data.size == 1 and scale.data.dtype == np.float32
            and (zp is None or isinstance(zp, Constant) and zp.data.size == 1)):
        return None
    zero = 0 if zp is None else int(zp.data.reshape(()))
    return ActQuant(float(scale.data.reshape(())), zero + QUANT_DTYPES[quantized.dtype])


def _single_user(e: Expr, users: dict[int, list[Expr]]) -> Call | None:
    """`e`'s one user, a call; None when it has several, or is the function's result (its own user)."""
    found = users.get(id(e), [])
    return found[0] if len(found) == 1 and isinstance(found[0], Call) and found[0] is not e else None


def _pool_step(call: Call, users: dict[int, list[Expr]]) -> Step | None:
    """DequantizeLinear -> max pool (values only) -> QuantizeLinear of the same parameters: a pool on int8."""
    if getattr(call.op, "name", None) != "nn.max_pool" or not _pool_shape_ok(call):
        return None
    x = act_quant(call.args[0], "quant.dequantize_linear")
    readers = users.get(id(call), [])
    values = readers[0] if len(readers) == 1 else None
    if x is None or not isinstance(values, TupleGetItem) or values.index != 0:
        return None
    q = _single_user(values, users)
    if act_quant(q, "quant.quantize_linear") != x or q.type.dtype != call.args[0].args[0].type.dtype:
        return None
    return Int8Step("npu", [call, values, q], kind="pool", x=x)


def _pool_shape_ok(call: Call) -> bool:
    a = call.attrs
    return (len(call.type.fields[0].shape) == 4 and len(set(a.strides or (1, 1))) == 1 and a.auto_pad == "NOTSET"
            and not a.ceil_mode and not any(d != 1 for d in a.dilations or ()))


def _matrix_step(call: Call, users: dict[int, list[Expr]], weights: Int8Weights, taken: set[int]) -> Step | None:
    """A conv / gemm / matmul of a DequantizeLinear and int8 weights, up to the QuantizeLinear behind it."""
    kind = _matrix_kind(call)
    x = act_quant(call.args[0], "quant.dequantize_linear") if kind else None
    weight = weights.lookup(call.args[1]) if x is not None and isinstance(call.args[1], Constant) else None
    if weight is None or not _per_output_channel(weight, call):
        return None
    step = Int8Step("npu", [call], kind=kind, x=x, weight=weight)
    if not _grow(step, users, taken, first=True):
        return None
    while _grow(step, users, taken, first=False):
        pass
    return step


def _matrix_kind(call: Call) -> str | None:
    name = getattr(call.op, "name", None)
    out = call.type
    if not (isinstance(out, TensorType) and out.is_static and out.dtype == "float32"):
        return None
    if name == "nn.conv":
        a = call.attrs
        channels = call.args[0].type.shape[1]
        depthwise = a.group == channels == out.shape[1]
        ok = (len(out.shape) == 4 and len(set(a.strides or (1, 1))) == 1 and a.auto_pad == "NOTSET"
              and (a.group == 1 or depthwise) and not any(d != 1 for d in a.dilations or ()))
        return "conv" if ok and _constant_bias(call, out.shape[1]) else None
    if name == "linalg.gemm":
        a = call.attrs
        ok = a.alpha == 1.0 and a.beta == 1.0 and a.transA == 0 and len(out.shape) == 2
        return "dense" if ok and _constant_bias(call, out.shape[1]) else None
    if name == "linalg.mat_mul":
        weight = call.args[1]
        return "dense" if len(out.shape) == 2 and isinstance(weight, Constant) and weight.data.ndim == 2 else None
    return None


def _constant_bias(call: Call, channels: int) -> bool:
    if len(call.args) < 3 or is_absent(call.args[2]):
        return True
    bias = call.args[2]
    return isinstance(bias, Constant) and bias.data.dtype == np.float32 and bias.data.size in (1, channels) \
        and bias.data.ndim <= 1


def _per_output_channel(weight: Int8Weight, call: Call) -> bool:
    """Whether the weights' scale is one value per output channel (the requantization's multiplier)."""
    axis = 1 if call.op.name == "linalg.mat_mul" or (call.op.name == "linalg.gemm" and not call.attrs.transB) else 0
    first = np.take(weight.scale, [0], axis=1 - axis) if weight.scale.ndim == 2 else weight.scale[:, :1, :1, :1]
    return bool(np.all(weight.scale == first)) and bool(np.all(first > 0))


def _grow(step: Int8Step, users: dict[int, list[Expr]], taken: set[int], first: bool) -> bool:
    """Extend `step` by [DequantizeLinear -> (residual add) ->] relu / clip ... -> QuantizeLinear (the first
    time without the DequantizeLinear); False, `step` unchanged, when the chain does not end in a
    QuantizeLinear or reaches a call an earlier step took."""
    calls: list[Call] = []
    stages: list[tuple[str, object]] = []
    tail = step.result
    if not first:
        user = _single_user(tail, users)
        dq = act_quant(user, "quant.dequantize_linear")
        if dq is None:
            return False
        calls.append(user)
        stages.append(("dq", dq))
        tail = user
        add = _single_user(tail, users)
        residual = None if any(k == "add" for k, _ in step.stages) else _residual(add, tail)
        if residual is not None:
            calls.append(add)
            stages.append(("add", residual))
            tail = add
    while True:
        user = _single_user(tail, users)
        bounds = _activation(user, tail)
        if bounds is None:
            break
        calls.append(user)
        stages += bounds
        tail = user
    q = act_quant(user, "quant.quantize_linear")
    if q is None or any(id(c) in taken for c in (*calls, user)):
        return False
    step.calls += [*calls, user]
    step.stages += [*stages, ("q", q)]
    return True


def _residual(add: Call | None, tail: Expr) -> Residual | None:
    """`add` of `tail` and another DequantizeLinear of the same shape, as the other addend; else None."""
    if getattr(getattr(add, "op", None), "name", None) != "math.add" or len(add.args) != 2:
        return None
    other = add.args[1] if add.args[0] is tail else add.args[0]
    quant = act_quant(other, "quant.dequantize_linear")
    if quant is None or other is tail or not (other.type == tail.type == add.type):
        return None
    return Residual(other.args[0], quant, other, add)


def _activation(user: Call | None, tail: Expr) -> list[tuple[str, object]] | None:
    """relu or clip by constants of `tail`, as float bounds; None for anything else."""
    name = getattr(getattr(user, "op", None), "name", None)
    if user is None or user.args[0] is not tail or user.type != tail.type:
        return None
    if name == "nn.relu":
        return [("max", 0.0)]
    if name == "math.clip" and len(user.args) == 3 and all(isinstance(b, Constant) and b.data.size == 1
                                                          for b in user.args[1:]):
        return [("max", float(user.args[1].data.reshape(()))), ("min", float(user.args[2].data.reshape(())))]
    return None
