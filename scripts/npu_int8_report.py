"""int8 on the simulated accelerator (issue 32): resnet18 and mobilenet_v2 quantized by `kiln.quantize`
(a few random calibration feeds), each next to its float32 build: cycles, bytes moved, the matrix unit's
utilization on compute-bound layers and how many matrix layers are DMA-bound, the steps left on the CPU.

Outputs are compared with the reference interpreter on the QDQ graph twice: as quantized (equal up to the
interpreter's float32 rounding of a convolution's sum, which can move a value across a rounding boundary),
and with every scale rounded to a power of two, where the interpreter's float arithmetic is exact too and
the two must agree bit for bit.

    PYTHONPATH=. python scripts/npu_int8_report.py [--size 224] [--models resnet18,mobilenet_v2] [--feeds 4]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

import kiln
from kiln.models import mobilenet_v2, resnet18
from kiln.npu.int8_placement import Int8Step
from kiln.npu.report import MATRIX_KINDS, kernel_line

MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


def totals(built, feeds: dict) -> tuple[dict, list[np.ndarray]]:
    """One run's numbers and outputs."""
    t0 = time.perf_counter()
    outs = built.run(feeds)
    wall = time.perf_counter() - t0
    runner = built.runner
    cost = runner.last_run
    lines = [kernel_line(k, s, runner.config) for k, s in cost.kernels]
    matrix = [k for k in lines if k.kind in MATRIX_KINDS]
    bound = [k for k in matrix if k.bound == "compute"]
    return {"cycles": sum(k.cycles for k in lines), "bytes": sum(k.dma_bytes for k in lines),
            "util": sum(k.ideal for k in bound) / max(1, sum(k.cycles for k in bound)),
            "dma_bound": f"{len(matrix) - len(bound)}/{len(matrix)}", "kernels": len(lines),
            "int8": sum(isinstance(s, Int8Step) for s, _ in runner.steps), "cpu": cost.cpu_steps,
            "transfers": cost.transfer_bytes, "wall": wall}, outs


def power_of_two_scales(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Quantize/DequantizeLinear scale rounded to the nearest power of two."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    scales = {n.input[1] for n in out.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    for init in out.graph.initializer:
        if init.name in scales:
            value = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(np.exp2(np.round(np.log2(value))).astype(value.dtype), init.name))
    return out


def with_last_quantized(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with the output of its last QuantizeLinear (the last integer tensor) as a second output."""
    out = onnx.shape_inference.infer_shapes(model)
    last = [n for n in out.graph.node if n.op_type == "QuantizeLinear"][-1]
    out.graph.output.append(next(v for v in out.graph.value_info if v.name == last.output[0]))
    return out


def compare(model: onnx.ModelProto, feeds: dict) -> tuple[dict, str]:
    mod = kiln.from_onnx(with_last_quantized(model))
    numbers, outs = totals(kiln.build(mod, "npu-sim"), feeds)
    want = kiln.evaluate(mod, feeds)
    steps = np.abs(outs[1].astype(np.int32) - want[1].astype(np.int32))
    return numbers, (f"last int8 tensor: {int(np.sum(steps != 0))} of {steps.size} values differ (at most "
                     f"{int(steps.max())} step); output max |diff| {float(np.max(np.abs(outs[0] - want[0]))):.3g}")


def report(name: str, size: int, calibration_feeds: int) -> None:
    source = MODELS[name](batch=1, size=size)
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)}
    feeds = {kiln.from_onnx(source).main.params[0].name: feeds["input"]}
    fp32, _ = totals(kiln.build(source, "npu-sim"), feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random calibration feeds
        quantized = kiln.quantize(source, calibrate=calibration_feeds).model
    int8, as_quantized = compare(quantized, feeds)
    _, exact = compare(power_of_two_scales(quantized), feeds)
    print(f"== {name} at {size}x{size}")
    print(f"{'':8s} {'cycles':>12s} {'bytes':>12s} {'util':>6s} {'DMA-bound':>10s} {'kernels':>7s} {'int8':>5s} "
          f"{'CPU steps':>9s} {'CPU<->NPU B':>11s} {'sim s':>6s}")
    for label, n in (("fp32", fp32), ("int8", int8)):
        print(f"{label:8s} {n['cycles']:12d} {n['bytes']:12d} {n['util']:6.1%} {n['dma_bound']:>10s} {n['kernels']:7d} "
              f"{n['int8']:5d} {n['cpu']:9d} {n['transfers']:11d} {n['wall']:6.1f}")
    print(f"int8 / fp32: cycles {int8['cycles'] / fp32['cycles']:.2f}x, bytes {int8['bytes'] / fp32['bytes']:.2f}x")
    print(f"int8 vs the interpreter on the QDQ graph: {as_quantized}")
    print(f"with power-of-two scales (exact float arithmetic in the interpreter): {exact}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--feeds", type=int, default=4, help="random calibration feeds")
    args = parser.parse_args()
    for name in args.models.split(","):
        report(name, args.size, args.feeds)


if __name__ == "__main__":
    main()
