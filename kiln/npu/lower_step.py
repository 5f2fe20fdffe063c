"""From a placed step (kiln.npu.placement) to an NpuKernel: the layer's shape as a ConvSpec, the
weights and per-channel constants laid out for the machine (weights (KH, KW, Cin, Cout), vectors
(1, 1, 1, C)), few input channels packed with the kernel's columns when the cost model says it is faster
(kiln.npu.packing), the tile (the cost model's pick, or the simple tiling) and the program; and a model's
steps to their kernels, with the intermediates that fit held on chip (kiln.npu.onchip)."""

from __future__ import annotations

import numpy as np

from kiln.ir.expr import Call, Constant, Expr, Function
from kiln.npu import onchip, packing, prefetch, tiling
from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, EpilogueOp, Tile
from kiln.npu.int8_lowering import lower_int8
from kiln.npu.int8_placement import Int8Step
from kiln.npu.kernel import NpuKernel
from kiln.npu.lower_conv import ALL_ON, Options, lower_conv
from kiln.npu.lower_vector import lower_pool
from kiln.npu.placement import Step

TILINGS = ("cost-model", "simple")


def lower_steps(fn: Function, steps: list[Step], config: NpuConfig, options: Options = ALL_ON,
                tiling_mode: str = "cost-model") -> list[NpuKernel | None]:
    """The kernel of each accelerator step of `fn` (None for a CPU step), named by its place; with
    `options.onchip`, the intermediates that fit stay on chip between them, and the cost model tiles
    each kernel again knowing which of its tensors are held; with `options.prefetch_weights`, each
    kernel's first weights load during the kernel before it where they fit (kiln.npu.prefetch)."""
    kernels = [lower_step(s, f"npu{i}_{s.anchor.op.name.split('.')[-1]}", config, options, tiling_mode)
               if s.device == "npu" else None for i, s in enumerate(steps)]
    if options.onchip:
        plan = onchip.plan(fn, steps, kernels, config)
        if tiling_mode == "cost-model":
            kernels = [k if k is None else _retiled(steps[i], k, i, plan, config, options)
                       for i, k in enumerate(kernels)]
        kernels = onchip.apply(kernels, plan)
    return prefetch.prefetch(kernels, config) if options.prefetch_weights else kernels


def _retiled(step: Step, kernel: NpuKernel, index: int, plan: onchip.Plan, config: NpuConfig,
             options: Options) -> NpuKernel:
    """`kernel` lowered with the tile the cost model picks when its held tensors cost on-chip moves (a held
    input re-read per output-channel tile is cheap, a smaller first weight block is exposed less), among
    the tiles that fit beside the held tensors; `kernel` itself when nothing of it is held or the new
    program would not fit. Its input-channel tile stays: each output element is the same sum, formed by the
    simulator the same way in any tile of rows and output channels, so the outputs stay bit-identical."""
    held = plan.names(index)
    if not held or kernel.tile is None:
        return kernel
    again = lower_step(step, kernel.name, plan.room(index, config), options, held=held, like=kernel.tile)
    return again if onchip.fits_beside(again.program, index, plan, config) else kernel


def lower_step(step: Step, name: str, config: NpuConfig, options: Options = ALL_ON,
               tiling_mode: str = "cost-model", held: frozenset[str] = frozenset(),
               like: Tile | None = None) -> NpuKernel:
    """The kernel of an accelerator step; `held` names its tensors kept on chip and `like` the tile
    whose input channels it keeps, for the cost model (tiling.best_tile)."""
    if isinstance(step, Int8Step):
        return lower_int8(step, name, config, options, tiling_mode, held, like)
    op = step.anchor.op.name
    if op in ("nn.max_pool", "nn.average_pool", "nn.global_average_pool"):
        return _pool(step.anchor, name, config, options)
    spec, constants = _conv(step.anchor) if op == "nn.conv" else _dense(step.anchor)
    epilogue, operands = _epilogue(step, constants)
    if options.pack_columns:
        spec = _maybe_packed(spec, constants, config, options, tuple(epilogue))
    tile = tiling.pick(spec, config, options, tuple(epilogue), tiling_mode, held, like)
    program = lower_conv(name, spec, tile, ("inp", "wgt", "out"), epilogue, config, options)
    kind = "dense" if op == "linalg.gemm" else "depthwise" if spec.depthwise else "conv"
    return NpuKernel(name, kind, program, spec, tile, constants,
                     {"inp": step.anchor.args[0], **operands}, (spec.n, spec.out_h, spec.out_w, spec.cout),
                     tuple(epilogue))


def _conv(call: Call) -> tuple[ConvSpec, dict[str, np.ndarray]]:
    n, cin, h, w = call.args[0].type.shape
    weights = call.args[1].data
    cout, _, kh, kw = weights.shape
    stride = (call.attrs.strides or (1, 1))[0]
    pads = tuple(call.attrs.pads or (0, 0, 0, 0))
    spec = ConvSpec(n, h, w, cin, cout, kh, kw, stride, (pads[0], pads[1], pads[2], pads[3]),
                    depthwise=call.attrs.group > 1)
    constants = {"wgt": np.ascontiguousarray(weights.transpose(2, 3, 1, 0))}
    if len(call.args) > 2 and isinstance(call.args[2], Constant):
        constants["bias"] = call.args[2].data.reshape(1, 1, 1, cout)
    return spec, constants


def _maybe_packed(spec: ConvSpec, constants: dict[str, np.ndarray], config: NpuConfig, options: Options,
                  epilogue: tuple[EpilogueOp, ...]) -> ConvSpec:
    """`spec` with its kernel columns packed into channels (its weights in constants re-read to match) when
    a tile of the packed layer fits and the cost model predicts it faster; else `spec`."""
    candidate = packing.packed(spec, config)
    if candidate is None:
        return spec
    try:
        faster = (tiling.best_cost(candidate, config, options, epilogue).cycles
                  < tiling.best_cost(spec, config, options, epilogue).cycles)
    except tiling.NoTileFitsError:  # the packed input's rows are wider: the unpacked layer's may still fit
        return spec
    if not faster:
        return spec
    constants["wgt"] = packing.packed_weights(constants["wgt"], candidate.pack)
    return candidate


def _dense(call: Call) -> tuple[ConvSpec, dict[str, np.ndarray]]:
    m, k = call.args[0].type.shape
    b = call.args[1].data
    weights = b.T if call.attrs.transB else b
    spec = ConvSpec(1, 1, m, k, weights.shape[1], 1, 1, 1, (0, 0, 0, 0))
    constants = {"wgt": np.ascontiguousarray(weights).reshape(1, 1, k, weights.shape[1])}
    if len(call.args) > 2:
        bias = call.args[2].data
        constants["bias"] = np.broadcast_to(bias, (weights.shape[1],)).reshape(1, 1, 1, -1).copy()
    return spec, constants


def _epilogue(step: Step, constants: dict[str, np.ndarray]) -> tuple[list[EpilogueOp], dict[str, Expr]]:
    """The vector-unit ops behind the anchor, and the model values they read. The leading chain of
    multiplications and additions by constants (a batch norm) is folded into the weights and one bias,
    so the vector unit adds once where it would have scaled and shifted."""
    rest = _fold_affine(step.epilogue, constants)
    ops = [EpilogueOp("add", tensor="bias", per_channel=True)] if "bias" in constants else []
    operands: dict[str, Expr] = {}
    for k, (op, operand) in enumerate(rest):
        if isinstance(operand, float):
            ops.append(EpilogueOp(op, imm=operand))
        elif isinstance(operand, Constant):
            constants[f"c{k}"] = operand.data.reshape(1, 1, 1, -1).astype(np.float32)
            ops.append(EpilogueOp(op, tensor=f"c{k}", per_channel=True))
        else:
            operands[f"r{k}"] = operand
            ops.append(EpilogueOp(op, tensor=f"r{k}"))
    return ops, operands


def _fold_affine(epilogue: list[tuple[str, Expr | float]],
                 constants: dict[str, np.ndarray]) -> list[tuple[str, Expr | float]]:
    """Fold the leading constant mul/add ops into constants["wgt"] (scaled per output channel) and
    constants["bias"]: (x @ w + b) * s + a == x @ (w * s) + (b * s + a). The ops left over."""
    cout = constants["wgt"].shape[-1]
    scale = np.ones(cout, np.float32)
    bias = constants["bias"].reshape(-1).copy() if "bias" in constants else np.zeros(cout, np.float32)
    folded = 0
    for op, operand in epilogue:
        if op not in ("mul", "add") or not isinstance(operand, (float, Constant)):
            break
        value = np.float32(operand) if isinstance(operand, float) else operand.data.reshape(-1).astype(np.float32)
        if op == "mul":
            scale, bias = scale * value, bias * value
        else:
            bias = bias + value
        folded += 1
    if folded:
        constants["wgt"] = (constants["wgt"] * scale).astype(np.float32)
        constants["bias"] = bias.reshape(1, 1, 1, -1).astype(np.float32)
    return epilogue[folded:]


def _pool(call: Call, name: str, config: NpuConfig, options: Options) -> NpuKernel:
    n, c, h, w = call.args[0].type.shape
    whole = call.op.name == "nn.global_average_pool"
    kh, kw = (h, w) if whole else call.attrs.kernel_shape
    stride = 1 if whole else (call.attrs.strides or (1, 1))[0]
    pads = (0, 0, 0, 0) if whole else tuple(call.attrs.pads or (0, 0, 0, 0))
    spec = ConvSpec(n, h, w, c, c, kh, kw, stride, (pads[0], pads[1], pads[2], pads[3]))
    op = "max" if call.op.name == "nn.max_pool" else "avg"
    program = lower_pool(name, op, spec, ("inp", "out"), config, options.double_buffer)
    return NpuKernel(name, "pool", program, spec, None, {}, {"inp": call.args[0]},
                     (n, spec.out_h, spec.out_w, c))

