"""SplitRNNProjection: an RNN/GRU/LSTM with constant weights becomes one matrix product for the input
projection of every step, then a recurrence-only op (kiln/op/rnn.py: nn.*_recurrence).

X·W^T does not depend on the state, so all steps and directions are one [steps x batch, input] x
[input, directions x gates] product, which pack-dense then runs on the packed GEMM kernel (inside the
recurrent kernel the same product ran at about 40 GFLOP/s, its vector loop along the gates only).
The biases become the product's epilogue add: Wb always, and Rb too where it is just added to the
gate (everywhere but the candidate gate of a GRU with linear_before_reset, which multiplies h·R^T + Rb
by the reset gate; that part stays the recurrence op's RB). R is transposed once here, so the step's
h·R^T reads contiguous panels.
"""

from __future__ import annotations

import numpy as np

from kiln.ir.expr import Call, Constant, Expr, Function, absent, is_absent
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import rewrite
from kiln.op.registry import OpDef, get_op
from kiln.transform.infra import PassContext, function_pass
from kiln.transform.pack_dense import panel_width

# full op -> its recurrence-only op
RECURRENCE_OPS = {"nn.rnn": "nn.rnn_recurrence", "nn.gru": "nn.gru_recurrence", "nn.lstm": "nn.lstm_recurrence"}
SPLIT_DTYPES = ("float32", "float64")  # the packed GEMM's; half-precision cells keep the fused form


def _arg(call: Call, i: int) -> Expr | None:
    return call.args[i] if i < len(call.args) and not is_absent(call.args[i]) else None


def _biases(call: Call, nd: int, gh: int, dtype: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(bias of the projection, RB of the recurrence), None where zero/omitted."""
    b = _arg(call, 3)
    if b is None:
        return None, None
    data = b.data.astype(dtype)  # type: ignore[union-attr]
    wb, rb = data[:, :gh], data[:, gh:]
    fold = rb.copy()
    if call.op.name == "nn.gru" and call.attrs.linear_before_reset:
        fold[:, 2 * (gh // 3):] = 0  # the candidate's Rb is scaled by the reset gate
    rest = rb - fold
    return (wb + fold).reshape(nd * gh), (rest if rest.any() else None)


def pack_panels(r: np.ndarray, nr: int) -> np.ndarray:
    """R (directions, gates, hidden) -> R^T in panels of nr gates (directions, gates / nr, hidden, nr),
    zero-padded: a step's h·R^T task then streams one contiguous panel. Read across a plain R^T, a
    panel's rows lie a whole gate row apart (2 KB on the audio LSTM), and the step ran 2x slower."""
    nd, gh, hidden = r.shape
    panels = -(-gh // nr)
    padded = np.zeros((nd, panels * nr, hidden), r.dtype)
    padded[:, :gh] = r
    return np.ascontiguousarray(padded.reshape(nd, panels, nr, hidden).transpose(0, 1, 3, 2))


def split_projection(call: Call, ctx: PassContext) -> Expr | None:
    x, w, r, b = call.args[0], _arg(call, 1), _arg(call, 2), _arg(call, 3)
    t = x.type
    if not (isinstance(t, TensorType) and t.dtype in SPLIT_DTYPES and t.shape is not None and len(t.shape) == 3):
        return None
    if not (isinstance(w, Constant) and isinstance(r, Constant) and (b is None or isinstance(b, Constant))):
        return None
    nd, gh, inp = w.data.shape
    wt = np.ascontiguousarray(w.data.astype(t.dtype).transpose(2, 0, 1).reshape(inp, nd * gh))
    xp = get_op("linalg.mat_mul")(x, Constant(wt))
    bias, rb = _biases(call, nd, gh, t.dtype)
    if bias is not None:
        xp = get_op("math.add")(xp, Constant(bias))
    rt = Constant(pack_panels(r.data.astype(t.dtype), panel_width(t.dtype, ctx)))
    args = [xp, rt, absent() if rb is None else Constant(rb), *call.args[4:]]
    while len(args) > 2 and is_absent(args[-1]):
        args.pop()
    return get_op(RECURRENCE_OPS[call.op.name])(*args, attrs=call.attrs)


@function_pass("split-rnn-projection", opt_level=2, config=("pack_dense.nr",))
def split_rnn_projection(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """nn.rnn/gru/lstm with constant W, R (and B) -> mat_mul(X, W^T) + bias, then nn.*_recurrence."""

    def post(old: Expr, new: Expr) -> Expr:
        if not (isinstance(new, Call) and isinstance(new.op, OpDef) and new.op.name in RECURRENCE_OPS):
            return new
        out = split_projection(new, ctx)
        return new if out is None or out.type != new.type else out

    return rewrite(fn, post)
