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
    conv = {3: t.nn.functional.conv1d, 4: t.nn.functional.conv2d}[w.dim()]
    return conv(x, w, b, stride=a.get("strides", 1), padding=pads[:half], dilation=a.get("dilations", 1),
                groups=a.get("group", 1))


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


def _conv_transpose(t, x, w, b=None, **a):
    pads = list(a.get("pads", [0] * (2 * (w.dim() - 2))))
    return t.nn.functional.conv_transpose2d(x, w, b, stride=a.get("strides", 1), padding=pads[:len(pads) // 2],
                                            groups=a.get("group", 1))


def _avg_pool(t, x, **a):
    pads = list(a.get("pads", [0, 0, 0, 0]))
    return t.nn.functional.avg_pool2d(x, a["kernel_shape"], a.get("strides", a["kernel_shape"]), pads[:2],
                                      count_include_pad=bool(a.get("count_include_pad", 0)))


def _slice(t, x, starts, ends, axes=None, steps=None):
    index = [slice(None)] * x.dim()
    axes = range(len(starts)) if axes is None else axes.tolist()
    steps = [1] * len(starts) if steps is None else steps.tolist()
    for ax, lo, hi, st in zip(axes, starts.tolist(), ends.tolist(), steps):
        index[ax] = slice(lo, hi, st)
    return x[tuple(index)]


def _resize(t, x, roi=None, scales=None, sizes=None, **a):
    text = {k: v.decode() for k, v in a.items() if isinstance(v, bytes)}
    if text.get("coordinate_transformation_mode", "half_pixel") != "half_pixel" or sizes is not None:
        raise NotImplementedError("Resize other than half-pixel scales")
    mode = {"nearest": "nearest", "linear": "bilinear"}[text.get("mode", "nearest")]
    return t.nn.functional.interpolate(x, scale_factor=[float(s) for s in scales[2:]], mode=mode)


def _pad(t, x, pads, value=None, **a):
    if a.get("mode", b"constant") != b"constant":
        raise NotImplementedError("Pad modes other than constant")
    p, n = pads.tolist(), x.dim()
    flat = [v for d in reversed(range(n)) for v in (p[d], p[d + n])]
    return t.nn.functional.pad(x, flat, value=0.0 if value is None else float(value))


def _unsqueeze(t, x, axes):
    for ax in sorted(a % (x.dim() + len(axes)) for a in axes.tolist()):
        x = x.unsqueeze(ax)
    return x


# the gate blocks of an ONNX recurrent op's weights in PyTorch's order: LSTM iofc -> ifco, GRU zrh -> rzh
_TORCH_GATES = {"LSTM": (0, 2, 3, 1), "GRU": (1, 0, 2)}


def _torch_params(t, op: str, w, r, b) -> list:
    """ONNX W [dirs, gates*H, I], R, B [dirs, 2*gates*H] as torch's flat per-direction w_ih, w_hh, b_ih, b_hh."""
    order = _TORCH_GATES[op]

    def gates(m):
        return t.cat([m.chunk(len(order), 0)[i] for i in order], 0).contiguous()

    return [gates(p) for d in range(w.shape[0]) for p in (w[d], r[d], *b[d].chunk(2, 0))]


def _recurrent(op: str):
    """An ONNX LSTM or GRU (default activations, no sequence lengths or initial state) as torch.lstm/gru."""
    cache: dict[tuple[int, int], list] = {}

    def run(t, x, w, r, b=None, *rest, **a):
        if any(v is not None for v in rest) or "activations" in a or (op == "GRU" and not a.get("linear_before_reset")):
            raise NotImplementedError(f"{op} with initial state, sequence lengths or other activations")
        params = cache.setdefault((id(w), id(r)), _torch_params(t, op, w, r, b))
        dirs, hidden = w.shape[0], a["hidden_size"]
        h0 = t.zeros(dirs, x.shape[1], hidden)
        hx = (h0, t.zeros_like(h0)) if op == "LSTM" else h0
        out = getattr(t, op.lower())(x, hx, params, True, 1, 0.0, False, dirs == 2, False)
        y = out[0].view(x.shape[0], x.shape[1], dirs, hidden).permute(0, 2, 1, 3)
        return (y, *out[1:])

    return run


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
    "HardSigmoid": lambda t, x, **a: t.clamp(x * a.get("alpha", 0.2) + a.get("beta", 0.5), 0.0, 1.0),
    "HardSwish": lambda t, x: t.nn.functional.hardswish(x),
    "Concat": lambda t, *xs, **a: t.cat(xs, a["axis"]),
    "AveragePool": _avg_pool,
    "ConvTranspose": _conv_transpose,
    "Slice": _slice,
    "Resize": _resize,
    "Pad": _pad,
    "Unsqueeze": _unsqueeze,
    "Expand": lambda t, x, shape: t.broadcast_to(x, t.broadcast_shapes(x.shape, tuple(shape.tolist()))),
    "InstanceNormalization": lambda t, x, s, b, **a: t.nn.functional.instance_norm(x, weight=s, bias=b,
                                                                                   eps=a.get("epsilon", 1e-5)),
    "LSTM": _recurrent("LSTM"),
    "GRU": _recurrent("GRU"),
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
