"""An int8 step (int8_placement.py) to an NpuKernel: int8 weights on the matrix unit, int32 accumulators,
and the requantization on the vector unit as the ONNX operators it replaces compute it.

The input's zero point: the matrix unit multiplies the stored int8 values x' (not x' - zp), so the
accumulator holds sum(x' * w) and the epilogue adds the compensation -zp * sum(w) per output channel
(exact in int32). Padding must then read as zp, not 0, for the compensation to cancel it: the program's
input loads fill with the zero point. After it, DequantizeLinear is `fmul` by x_scale * w_scale[c]
(float32), the float bias follows in float32, and QuantizeLinear is one `Requantize` (divide by y_scale
in float32, round half to even, add the zero point, saturate; a relu / clip before it as its limits): the
interpreter's own steps in its order; a requantization chain behind (DequantizeLinear -> relu ->
QuantizeLinear) is a `Dequantize` of the accumulators and another `Requantize`.
A residual add (DequantizeLinear of another int8 tensor) loads that tensor's tile into the aux buffer,
dequantizes it there (`Dequantize`) and adds it to the float accumulators.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kiln.ir.expr import Constant
from kiln.npu import tiling
from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, EpilogueOp, Tile
from kiln.npu.int8_placement import ActQuant, Int8Step, Residual
from kiln.npu.isa import Alu, Dequantize, Instruction, Load, Requantize
from kiln.npu.kernel import NpuKernel
from kiln.npu.lower_conv import ALL_ON, Options, lower_conv
from kiln.npu.lower_vector import lower_pool

INT8_RANGE = (-128, 127)
RESIDUAL, RESIDUAL_ADD = "res", "add_dequantized"  # the residual operand's DRAM name, its epilogue op
REQUANTIZE, DEQUANTIZE = "requantize", "dequantize"  # placeholder epilogue ops (see stage_ops)


def lower_int8(step: Int8Step, name: str, config: NpuConfig, options: Options = ALL_ON,
               tiling_mode: str = "cost-model", held: frozenset[str] = frozenset(),
               like: Tile | None = None) -> NpuKernel:
    """The kernel of an int8 step; `held` and `like` as lower_step's."""
    if step.kind == "pool":
        return _pool(step, name, config, options)
    spec, wgt, scale = _conv(step) if step.kind == "conv" else _dense(step)
    constants = {"wgt": wgt}
    stages, quantizations = stage_ops(step.stages)
    epilogue = _accumulator_ops(step, wgt, scale, constants) + stages
    tile = tiling.pick(spec, config, options, tuple(epilogue), tiling_mode, held, like)
    program = lower_conv(name, spec, tile, ("inp", "wgt", "out"), epilogue, config, options)
    residual = next((r for k, r in step.stages if k == "add"), None)
    program.instructions = _expanded(program.instructions, step.x.zero_point, residual,  # type: ignore[arg-type]
                                     quantizations)
    operands = {"inp": step.source, **({RESIDUAL: residual.source} if residual else {})}  # type: ignore[union-attr]
    kind = "depthwise" if spec.depthwise else step.kind
    return NpuKernel(name, kind, program, spec, tile, constants, operands,
                     (spec.n, spec.out_h, spec.out_w, spec.cout), tuple(epilogue))


def _conv(step: Int8Step) -> tuple[ConvSpec, np.ndarray, np.ndarray]:
    """The spec, weights (KH, KW, Cin, Cout) int8 and weight scale per output channel of a convolution."""
    call = step.anchor
    n, cin, h, w = call.args[0].type.shape
    values = step.weight.values
    cout, _, kh, kw = values.shape
    pads = tuple(call.attrs.pads or (0, 0, 0, 0))
    spec = ConvSpec(n, h, w, cin, cout, kh, kw, (call.attrs.strides or (1, 1))[0],
                    (pads[0], pads[1], pads[2], pads[3]), "int8", depthwise=call.attrs.group > 1)
    return spec, np.ascontiguousarray(values.transpose(2, 3, 1, 0)), step.weight.scale[:, 0, 0, 0]


def _dense(step: Int8Step) -> tuple[ConvSpec, np.ndarray, np.ndarray]:
    """A gemm / matmul as a 1x1 convolution over a row of M pixels: weights (1, 1, K, N)."""
    call = step.anchor
    m, k = call.args[0].type.shape
    transposed = call.op.name == "linalg.gemm" and call.attrs.transB
    values, scale = step.weight.values, step.weight.scale
    weights, per_column = (values.T, scale[:, 0]) if transposed else (values, scale[0, :])
    spec = ConvSpec(1, 1, m, k, weights.shape[1], 1, 1, 1, (0, 0, 0, 0), "int8")
    return spec, np.ascontiguousarray(weights).reshape(1, 1, k, -1), per_column


def _accumulator_ops(step: Int8Step, wgt: np.ndarray, scale: np.ndarray,
                     constants: dict[str, np.ndarray]) -> list[EpilogueOp]:
    """The zero point's compensation, the dequantization of the accumulators and the float bias."""
    cout = wgt.shape[-1]
    ops = []
    compensation = -step.x.zero_point * wgt.astype(np.int64).sum(axis=(0, 1, 2))
    if np.any(compensation):
        constants["comp"] = compensation.astype(np.int32).reshape(1, 1, 1, cout)
        ops.append(EpilogueOp("add", tensor="comp", per_channel=True))
    constants["mult"] = (np.float64(step.x.scale) * scale.astype(np.float64)).astype(np.float32).reshape(1, 1, 1, cout)
    ops.append(EpilogueOp("fmul", tensor="mult", per_channel=True))
    call = step.anchor
    if len(call.args) > 2 and isinstance(call.args[2], Constant):
        constants["bias"] = np.broadcast_to(call.args[2].data.reshape(-1), (cout,)).reshape(1, 1, 1, cout).copy()
        ops.append(EpilogueOp("add", tensor="bias", per_channel=True))
    return ops


def stage_ops(stages: list[tuple[str, object]]) -> tuple[list[EpilogueOp], list[Requantize | Dequantize]]:
    """Vector-unit ops of the steps after the accumulation: float bounds, a residual add, and Quantize /
    DequantizeLinear as placeholders (imm: the index of their instruction in the second list, for any
    accumulator slot) that `_expanded` replaces, since an EpilogueOp cannot spell them. Bounds right before a
    QuantizeLinear become its saturation limits: rounding x / scale is monotone, so clipping before or after
    gives the same integers."""
    ops: list[EpilogueOp] = []
    instructions: list[Requantize | Dequantize] = []
    bounds: list[tuple[str, float]] = []  # since the last QuantizeLinear (int8_placement ends each chain with one)
    for kind, value in stages:
        if kind in ("max", "min"):
            bounds.append((kind, float(value)))  # type: ignore[arg-type]
        elif kind == "add":
            ops.append(EpilogueOp(RESIDUAL_ADD, tensor=RESIDUAL))
        else:
            instructions.append(_requantize(value, bounds) if kind == "q" else  # type: ignore[arg-type]
                                Dequantize("acc", 0, value.zero_point, value.scale))  # type: ignore[union-attr]
            ops.append(EpilogueOp(REQUANTIZE if kind == "q" else DEQUANTIZE, imm=len(instructions) - 1))
            bounds = []
    return ops, instructions


def _requantize(q: ActQuant, bounds: list[tuple[str, float]]) -> Requantize:
    """QuantizeLinear behind float `bounds` (max / min, in order: together a clip to [low, high]), with the
    clip's limits quantized as its saturation limits."""
    low, high = -np.inf, np.inf
    for kind, bound in bounds:
        pick = max if kind == "max" else min
        low, high = pick(low, bound), pick(high, bound)

    def limit(value: float, default: int) -> int:
        if np.isinf(value):
            return default
        return int(np.clip(np.rint(np.float32(value) / np.float32(q.scale)) + q.zero_point, *INT8_RANGE))

    return Requantize(0, q.scale, q.zero_point, limit(low, INT8_RANGE[0]), limit(high, INT8_RANGE[1]))


def _expanded(instructions: list[Instruction], zero_point: int, residual: Residual | None,
              quantizations: list[Requantize | Dequantize]) -> list[Instruction]:
    """The lowered instructions with the input tiles' padding read as the input's zero point, each add of
    the int8 residual tile preceded by its dequantization, and the placeholders of stage_ops replaced."""
    out: list[Instruction] = []
    for ins in instructions:
        if isinstance(ins, Load) and ins.buf == "inp" and zero_point:
            out.append(dataclasses.replace(ins, fill=zero_point))
        elif isinstance(ins, Alu) and ins.op == RESIDUAL_ADD and residual is not None:
            out += [Dequantize("aux", ins.aux_slot, residual.quant.zero_point, residual.quant.scale),
                    dataclasses.replace(ins, op="add")]
        elif isinstance(ins, Alu) and ins.op in (REQUANTIZE, DEQUANTIZE):
            q = quantizations[int(ins.imm)]  # type: ignore[arg-type]
            out.append(dataclasses.replace(q, acc_slot=ins.acc_slot) if isinstance(q, Requantize)
                       else dataclasses.replace(q, slot=ins.acc_slot))
        else:
            out.append(ins)
    return out


def _pool(step: Int8Step, name: str, config: NpuConfig, options: Options) -> NpuKernel:
    call = step.anchor
    n, c, h, w = call.args[0].type.shape
    kh, kw = call.attrs.kernel_shape
    pads = tuple(call.attrs.pads or (0, 0, 0, 0))
    spec = ConvSpec(n, h, w, c, c, kh, kw, (call.attrs.strides or (1, 1))[0], (pads[0], pads[1], pads[2], pads[3]),
                    "int8")
    program = lower_pool(name, "max", spec, ("inp", "out"), config, options.double_buffer)
    return NpuKernel(name, "pool", program, spec, None, {}, {"inp": step.source}, (n, spec.out_h, spec.out_w, c))
