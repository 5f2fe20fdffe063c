"""`kiln quantize` / `kiln.quantize(...)`: Kiln's own quantizer, ONNX in, QDQ (or dynamic-int8) ONNX out.

Batch norms after convs are folded into them first. Static: the float model runs on calibration
feeds in Kiln's reference interpreter with every intermediate exposed; observers (min-max,
percentile, entropy) turn each activation's values into a range; the rule table (`rules.py`) picks
the nodes and the QDQ rewrite (`qdq.py`) writes uint8 activations, int8 per-channel weights and
int32 biases. Dynamic (`dynamic.py`): int8 MatMul/Gemm weights, activations quantized at run time.
The error report (`error_report.py`) compares every tensor of the float and quantized models.
Nothing here runs ONNX Runtime.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import onnx

from kiln.errors import QuantizeError
from kiln.frontend.onnx import load_model
from kiln.ir.module import IRModule
from kiln.quantization.activations import exposing, float_tensors, run_all
from kiln.quantization.calibration_data import Feeds, calibration_feeds
from kiln.quantization.dynamic import quantize_dynamic
from kiln.quantization.error_report import ErrorReport, ErrorSum, producers
from kiln.quantization.fold_batchnorm import fold_batchnorm
from kiln.quantization.observers import make_observer
from kiln.quantization.params import ActivationParams
from kiln.quantization.plan import plan_static
from kiln.quantization.qdq import Range, rewrite_qdq

QDQ_OPSET = 13  # per-axis QuantizeLinear/DequantizeLinear
REPORT_FEEDS = 8  # feeds the error report runs both models on
RANDOM_REPORT_FEEDS = 4  # random feeds for a dynamic model's report when no data is given


@dataclass(frozen=True)
class QuantizeResult:
    model: onnx.ModelProto
    ranges: dict[str, Range]  # calibrated activation ranges (static)
    report: ErrorReport | None


def quantize(model: str | os.PathLike | onnx.ModelProto, output: str | os.PathLike | None = None, *,
             calibrate: str | int | os.PathLike | None = None, method: str = "minmax", percentile: float = 99.99,
             per_channel: bool = True, dynamic: bool = False, report: bool = False) -> QuantizeResult:
    """Quantize `model`; write it to `output` (atomically) when given.

    calibrate: a directory of .npz/.npy feed files (see calibration_data.py) or a number of random feeds;
    needed for static quantization, and used by the report of a dynamic one."""
    if not dynamic and calibrate is None:
        raise QuantizeError("static quantization needs calibration data: a directory of .npz/.npy feeds or a "
                            "number of random feeds (--calibrate); or quantize dynamically (--dynamic)")
    make_observer(method, percentile)  # a bad method or percentile fails here, before any work
    source = fold_batchnorm(_at_least_opset(load_model(model), QDQ_OPSET))
    floats = float_tensors(source)
    float_mod = exposing(source, floats)
    feeds = [] if calibrate is None else [f for _, f in calibration_feeds(calibrate, float_mod)]
    if dynamic:
        quantized, ranges, params, dequantized = quantize_dynamic(source, floats, per_channel), {}, {}, {}
    else:
        plan = plan_static(source, floats, per_channel)
        if not plan.nodes:
            warnings.warn("no operator of the model is one the quantizer's rule table covers; the output is "
                          "the float model", stacklevel=2)
        ranges = calibrate_ranges(float_mod, feeds, plan.observed(), method, percentile)
        quantized, rewrite = rewrite_qdq(source, plan, ranges)
        params, dequantized = rewrite.params, rewrite.dequantized
    _check(quantized)
    found = None
    if report:
        mode = "dynamic" if dynamic else f"static, {method}"
        found = error_report(source, float_mod, quantized, list(floats), feeds or _report_feeds(float_mod), params,
                             dequantized, f"{mode}, {'per-channel' if per_channel else 'per-tensor'} weights")
    if output is not None:
        save_atomic(quantized, os.fspath(output))
    return QuantizeResult(quantized, ranges, found)


def calibrate_ranges(float_mod: IRModule, feeds: list[Feeds], tensors: list[str], method: str,
                     percentile: float) -> dict[str, Range]:
    """Each tensor's range over the feeds, as the method's observer sees it."""
    observers = {t: make_observer(method, percentile) for t in tensors}
    for values in run_all(float_mod, feeds):
        for t, observer in observers.items():
            observer.add(values[t])
    return {t: observer.range() for t, observer in observers.items()}


def error_report(source: onnx.ModelProto, float_mod: IRModule, quantized: onnx.ModelProto, floats: list[str],
                 feeds: list[Feeds], params: dict[str, ActivationParams], dequantized: dict[str, str],
                 mode: str) -> ErrorReport:
    """Every float tensor a node produces, float model (float_mod: source with `floats` exposed) against
    quantized model, over the first feeds."""
    op_of = producers(source.graph.node)
    wanted = set(floats)
    names = [o for n in source.graph.node for o in n.output if o in wanted]
    sums = [ErrorSum(t, op_of[t], params.get(t)) for t in names]
    feeds = feeds[:REPORT_FEEDS]
    quantized_mod = exposing(quantized, [dequantized.get(t, t) for t in names])
    for ref, got in zip(run_all(float_mod, feeds), run_all(quantized_mod, feeds)):
        for s in sums:
            s.add(ref[s.name], got[dequantized.get(s.name, s.name)])
    return ErrorReport([s.result() for s in sums], len(feeds), mode)


def _report_feeds(float_mod: IRModule) -> list[Feeds]:
    return [f for _, f in calibration_feeds(RANDOM_REPORT_FEEDS, float_mod)]


def _at_least_opset(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """The model at default-domain opset `version` or later (converted when older)."""
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    if current >= version:
        return model
    try:
        return onnx.version_converter.convert_version(model, version)
    except Exception as e:
        raise QuantizeError(f"the model's opset {current} could not be raised to {version}, which per-channel "
                            f"quantization needs: {e}") from None


def _check(model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise QuantizeError(f"the quantized model fails the ONNX checker: {str(e)[:500]}") from None


def save_atomic(model: onnx.ModelProto, path: str) -> None:
    """Write the model so that a reader never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        onnx.save_model(model, tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise QuantizeError(f"cannot write {path}: {e}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
