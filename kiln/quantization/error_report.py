"""The error each layer adds: every float tensor of the model against the same tensor in the quantized
model (SQNR in dB, max abs error, cosine), like ONNX Runtime's qdq_loss_debug, as a table and JSON.

For each tensor two numbers of SQNR: "model" compares the quantized model's value (after its own
Q/DQ where it has one) with the float model's, so it holds all the error upstream too; "own" is the
SQNR of the float value through the tensor's own Q/DQ alone, the part this tensor adds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
import onnx

from kiln.quantization.params import ActivationParams


@dataclass(frozen=True)
class TensorError:
    name: str
    op: str  # the operator that produces it ("input" for a graph input)
    sqnr_db: float
    max_abs_error: float
    cosine: float
    own_sqnr_db: float | None  # None: the tensor is not quantized itself


class ErrorSum:
    """One tensor's error summed over feeds, so no feed's values need keeping."""

    def __init__(self, name: str, op: str, params: ActivationParams | None):
        self.name, self.op, self.params = name, op, params
        self.signal = self.noise = self.own_noise = self.dot = self.ref_sq = self.got_sq = self.max_error = 0.0

    def add(self, reference: np.ndarray, quantized: np.ndarray) -> None:
        ref = np.asarray(reference, np.float64).reshape(-1)
        got = np.asarray(quantized, np.float64).reshape(-1)
        diff = ref - got
        self.signal += float(ref @ ref)
        self.noise += float(diff @ diff)
        self.dot += float(ref @ got)
        self.got_sq += float(got @ got)
        self.max_error = max(self.max_error, float(np.abs(diff).max(initial=0.0)))
        if self.params is not None:
            own = ref - self.params.fake_quantize(ref)
            self.own_noise += float(own @ own)

    def result(self) -> TensorError:
        norm = np.sqrt(self.signal * self.got_sq)
        cos = self.dot / norm if norm > 0 else float(self.noise == 0.0)
        own = None if self.params is None else _sqnr(self.signal, self.own_noise)
        return TensorError(self.name, self.op, _sqnr(self.signal, self.noise), self.max_error, float(cos), own)


def _sqnr(signal: float, noise: float) -> float:
    """10 log10(signal / noise); inf when there is no noise."""
    if noise == 0.0:
        return float("inf")
    return float(10.0 * np.log10(signal / noise)) if signal > 0 else float("-inf")


@dataclass(frozen=True)
class ErrorReport:
    tensors: list[TensorError]
    feeds: int
    mode: str  # "static (minmax, per-channel)", "dynamic", ...

    def table(self) -> str:
        lines = [f"quantization error per tensor ({self.mode}; {self.feeds} feed(s)); SQNR in dB, higher is better",
                 f"{'tensor':40s} {'op':18s} {'SQNR':>8s} {'own':>8s} {'max err':>10s} {'cosine':>8s}"]
        for t in self.tensors:
            own = "-" if t.own_sqnr_db is None else f"{t.own_sqnr_db:8.2f}"
            lines.append(f"{t.name[:40]:40s} {t.op[:18]:18s} {t.sqnr_db:8.2f} {own:>8s} {t.max_abs_error:10.4g} "
                         f"{t.cosine:8.5f}")
        return "\n".join(lines)

    def to_json(self) -> str:
        """Strict JSON: an infinite SQNR (no error at all) is written as null."""
        finite = lambda v: None if isinstance(v, float) and not np.isfinite(v) else v
        rows = [{k: finite(v) for k, v in asdict(t).items()} for t in self.tensors]
        return json.dumps({"mode": self.mode, "feeds": self.feeds, "tensors": rows}, indent=1)


def producers(nodes: Iterable[onnx.NodeProto]) -> dict[str, str]:
    """Tensor name -> the op type of the node that writes it."""
    return {o: n.op_type for n in nodes for o in n.output if o}


def write_json(report: ErrorReport, path: str) -> None:
    """The report as JSON at `path`, written so that a reader never sees half of it."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(report.to_json())
    os.replace(tmp, path)
