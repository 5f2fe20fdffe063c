"""PyTorch eager as a benchmark peer: an ONNX graph replayed op by op with torch functions.

The benchmark models are built as ONNX from code (no downloads, no torchvision). Replaying their
nodes with `torch.nn.functional` calls is what a hand-written nn.Module's forward does — one eager
kernel dispatch per op — with the same weights, so the peer's outputs can be checked against Kiln's.
Only the ops the built-in models use are mapped; any other op is a clear error naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _conv(t, x, w, b=None, **a):
    pads = list(a.get("pads", [0] * (2 * (w.dim() - 2))))
    half = len(pads) // 2
    if pads[:half] != pads[half:]:
        raise NotImplementedError("asymmetric Conv pads")
    return t.nn.functional.conv2d(x, w, b, stride=a.get("strides", 1), padding=pads[:half],
                                  dilation=a.get("dilations", 1), groups=a.get("group", 1))


def _max_pool(t, x, **a):
    pads = list(a.get("pads", [0, 0, 0, 0]))
    return t.nn.functional.max_pool2d(x, a["kernel_shape"], a.get("strides", a["kernel_shape"]), pads[:2])


def _gemm(t, a_, b, c=None, **a):
    a_ = a_.T if a.get("transA", 0) else a_
    b = b.T if a.get("transB", 0) else b
    y = a.get("alpha", 1.0) * (a_ @ b)
    return y if c is None else y + a.get("beta", 1.0) * c


def _reshape(t, x, shape, **a):
    dims = [x.shape[i] if d == 0 else d for i, d in enumerate(shape.tolist())]
    return x.reshape(dims)


def _layer_norm(t, x, g, b=None, **a):
    axis = a.get("axis", -1) % x.dim()
    return t.nn.functional.layer_norm(x, x.shape[axis:], g, b, a.get("epsilon", 1e-5))


OPS: dict[str, Callable[..., Any]] = {
    "Add": lambda t, x, y: x + y,
    "Mul": lambda t, x, y: x * y,
    "Relu": lambda t, x: t.relu(x),
    "Sigmoid": lambda t, x: t.sigmoid(x),
    "Tanh": lambda t, x: t.tanh(x),
    "Pow": lambda t, x, y: t.pow(x, y),
    "Where": lambda t, c, x, y: t.where(c, x, y),
    "Split": lambda t, x, sizes=None, **a: t.split(x, [int(v) for v in sizes], a.get("axis", 0)),
    "Erf": lambda t, x: t.erf(x),
    "Identity": lambda t, x: x,
    "Clip": lambda t, x, lo=None, hi=None: t.clamp(x, None if lo is None else float(lo),
                                                   None if hi is None else float(hi)),
    "Conv": _conv,
    "MaxPool": _max_pool,
    "BatchNormalization": lambda t, x, s, b, m, v, **a: t.nn.functional.batch_norm(x, m, v, s, b, False, 0.0,
                                                                                   a.get("epsilon", 1e-5)),
    "GlobalAveragePool": lambda t, x: t.nn.functional.adaptive_avg_pool2d(x, 1),
    "Flatten": lambda t, x, **a: t.flatten(x, a.get("axis", 1)),
    "Gemm": _gemm,
    "MatMul": lambda t, x, y: x @ y,
    "Gather": lambda t, d, i, **a: t.index_select(d, a.get("axis", 0), i.reshape(-1)).reshape(
        *d.shape[:a.get("axis", 0)], *i.shape, *d.shape[a.get("axis", 0) + 1:]),
    "Reshape": _reshape,
    "Transpose": lambda t, x, **a: x.permute(*a["perm"]),
    "Softmax": lambda t, x, **a: t.softmax(x, a.get("axis", -1)),
    "LayerNormalization": _layer_norm,
}


class EagerReplay:
    """Runs an ONNX graph with torch ops; `run(feeds)` takes and returns numpy arrays."""

    def __init__(self, model: onnx.ModelProto, threads: int) -> None:
        import torch

        self.torch = torch
        torch.set_num_threads(threads)
        unknown = sorted({n.op_type for n in model.graph.node} - set(OPS))
        if unknown:
            raise NotImplementedError(f"torch replay has no mapping for ONNX ops {unknown}")
        self.consts = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in model.graph.initializer}
        self.nodes = [(n.op_type, list(n.input), list(n.output), _attrs(n)) for n in model.graph.node]
        self.outputs = [o.name for o in model.graph.output]
        self.threads = threads

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        t = self.torch
        t.set_num_threads(self.threads)
        env = dict(self.consts)
        env.update({k: t.from_numpy(v) for k, v in feeds.items()})
        with t.inference_mode():
            for op, ins, outs, attrs in self.nodes:
                args = [env[i] if i else None for i in ins]
                if op in ("Reshape",):
                    args[1] = args[1].numpy()
                y = OPS[op](t, *args, **attrs)
                env.update(zip(outs, y) if isinstance(y, tuple) else [(outs[0], y)])
        return [env[o].numpy() for o in self.outputs]
