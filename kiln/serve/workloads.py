"""The bench-serve workloads (issue 28, after DISB's A-E): which models send real-time requests at
what share of the cores, with uniform or Poisson arrivals, and which send best-effort requests in a
closed loop. RT rates are set from RT utilization = rate x latency alone, so a workload loads any
machine alike. K-T is two tiny models for tests and a quick look."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kiln.errors import KilnError

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class RtStream:
    """Open-loop RT clients of `model` keeping it busy `utilization` of the time (alone)."""

    model: str
    utilization: float
    arrival: str = "uniform"  # or "poisson"


@dataclass(frozen=True)
class Workload:
    name: str
    rt: tuple[RtStream, ...]
    be: tuple[str, ...]  # one closed-loop BE client per entry

    @property
    def models(self) -> list[str]:
        return sorted({s.model for s in self.rt} | set(self.be))

    @property
    def rt_utilization(self) -> float:
        return sum(s.utilization for s in self.rt)


def _builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    """Batch-1 builders of the benchmark models (as scripts/bench_models.py builds them)."""
    import kiln.models as M

    return {"mobilenet_v2": lambda: M.mobilenet_v2(batch=1), "resnet50": lambda: M.resnet50(batch=1),
            "resnet18": lambda: M.resnet18(batch=1), "bert": lambda: M.bert(batch=1), "mlp": lambda: M.mlp(batch=1),
            "tiny_rt": lambda: M.mlp(batch=16, sizes=(256, 1024, 1024, 16)),
            "tiny_be": lambda: M.mlp(seed=1, batch=64, sizes=(256, 1024, 1024, 16))}


_FOUR = ("mobilenet_v2", "resnet18", "bert", "mlp")


def _kd(arrival: str) -> tuple[RtStream, ...]:
    return tuple(RtStream(m, 0.10, arrival) for m in _FOUR)


WORKLOADS = {w.name: w for w in (
    Workload("K-A", (RtStream("mobilenet_v2", 0.30),), ("resnet50",)),
    Workload("K-B", (RtStream("mobilenet_v2", 0.60),), ("resnet50",)),
    Workload("K-C", (RtStream("mobilenet_v2", 0.30),), ("resnet50", "resnet18", "bert", "mlp")),
    Workload("K-D", _kd("uniform"), _FOUR),
    Workload("K-E", _kd("poisson"), _FOUR),
    Workload("K-T", (RtStream("tiny_rt", 0.30, "poisson"),), ("tiny_be",)),
)}
ISSUE_WORKLOADS = ("K-A", "K-B", "K-C", "K-D", "K-E")  # what `kiln bench-serve` runs when not told


def workload(name: str) -> Workload:
    if name not in WORKLOADS:
        raise KilnError(f"unknown workload '{name}'; the workloads are {', '.join(WORKLOADS)}")
    return WORKLOADS[name]


def build_onnx(name: str) -> onnx.ModelProto:
    builders = _builders()
    if name not in builders:
        raise KilnError(f"unknown benchmark model '{name}'; the models are {', '.join(builders)}")
    return builders[name]()


def feeds_for(inputs: list, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for a model's inputs (TensorInfo): token ids for int64, normal floats otherwise."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in inputs:
        if t.dtype == "int64":
            out[t.name] = rng.integers(0, 1000, t.shape).astype(np.int64)
        else:
            out[t.name] = rng.standard_normal(t.shape).astype(np.dtype(t.dtype))
    return out
