"""nn.rnn / nn.gru / nn.lstm compiled to one C kernel (a serial time loop around the cell's loop
nests) against the operators' numpy references: every direction, sequence_lens, initial states,
peepholes, clip, every activation with alpha/beta, linear_before_reset, input_forget, both layouts,
every dtype, odd sizes and symbolic sequence/batch dims."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import kiln
from kiln import tir
from kiln.errors import ComputeError
from kiln.ir import Constant, Function, IRModule, SizeVar, TensorType, Var
from kiln.ir import dtype as dt
from kiln.ir.expr import absent
from kiln.op import get_op
from kiln.tir.functor import walk
from tests.topi.harness import RTOL

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
GATES = {"nn.rnn": 1, "nn.gru": 3, "nn.lstm": 4}
ACTS_A = dict(activations=("Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu"),
              activation_alpha=(0.9, 0.1, 0.3, 1.2, 0.25, 0.8), activation_beta=(0.1, 0.7, 0.4))
ACTS_B = dict(activations=("Softsign", "Softplus", "Relu", "Sigmoid", "Tanh", "Softsign"))


def _arrays(op: str, sizes, nd: int, dtype: str, layout: int, bias: bool, lens: bool, init: bool, peep: bool,
            rng) -> list[np.ndarray | None]:
    seq, batch, inp, hidden = sizes
    g = GATES[op] * hidden
    npd = dt.to_numpy(dtype)

    def rand(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(npd)

    state = (batch, nd, hidden) if layout else (nd, batch, hidden)
    seq_lens = None
    if lens:
        seq_lens = rng.integers(0, seq + 1, batch).astype(np.int32)
        seq_lens[0] = seq
        if batch > 2:
            seq_lens[-1] = 0
    out = [rand(*((batch, seq, inp) if layout else (seq, batch, inp))), rand(nd, g, inp, scale=0.5),
           rand(nd, g, hidden, scale=0.5), rand(nd, 2 * g, scale=0.5) if bias else None, seq_lens,
           rand(*state) if init else None]
    if op == "nn.lstm":
        out += [rand(*state) if init else None, rand(nd, 3 * hidden, scale=0.5) if peep else None]
    while out[-1] is None:
        out.pop()
    return out


def _module(op: str, attrs: dict, arrays, dims=None) -> IRModule:
    """A main calling `op`: X and sequence_lens are parameters (symbolic dims from `dims`), the rest constants."""
    args, params = [], []
    for k, a in enumerate(arrays):
        if a is None:
            args.append(absent())
        elif k in (0, 4):
            shape = dims[k] if dims else a.shape
            params.append(Var(f"in{k}", TensorType(shape, dt.from_numpy(a.dtype))))
            args.append(params[-1])
        else:
            args.append(Constant(a))
    return IRModule({"main": Function(tuple(params), get_op(op)(*args, **attrs))})


def _check(op: str, attrs: dict, arrays, dims=None, runs=None) -> None:
    mod = _module(op, attrs, arrays, dims)
    cm = kiln.build(mod)
    assert cm.host_groups == [], cm.host_groups
    ref_attrs = mod.main.body.attrs
    for data in runs or [arrays]:
        feeds = {p.name: data[int(p.name[2:])] for p in mod.main.params}
        got = cm.run(feeds)
        want = get_op(op).reference(ref_attrs, *data)
        for k, (g, w) in enumerate(zip(got, want)):
            tol = RTOL[dt.from_numpy(w.dtype)]
            assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, g.dtype, w.shape, w.dtype)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol,
                                       err_msg=f"{op} output {k} {attrs}")


# (op, direction, layout, bias, lens, init, peep, extra attrs, dtype, (seq, batch, input, hidden))
CASES = [
    ("nn.rnn", "forward", 0, True, True, True, False, {}, "float32", (5, 3, 4, 7)),
    ("nn.rnn", "reverse", 1, False, True, False, False, dict(clip=1.5), "float32", (4, 2, 3, 5)),
    ("nn.rnn", "bidirectional", 0, True, False, True, False,
     dict(activations=("Relu", "Affine"), activation_alpha=(0.7,), activation_beta=(0.2,)), "float64", (3, 1, 1, 1)),
    ("nn.rnn", "bidirectional", 1, True, True, True, False, dict(activations=("HardSigmoid", "Elu")), "float32",
     (6, 4, 2, 3)),
    ("nn.gru", "forward", 1, True, False, True, False, dict(linear_before_reset=1), "float32", (1, 1, 2, 3)),
    ("nn.gru", "reverse", 0, True, True, True, False, {}, "float16", (6, 3, 5, 4)),
    ("nn.gru", "bidirectional", 0, True, True, True, False, dict(linear_before_reset=1, clip=0.8), "float32",
     (5, 4, 3, 9)),
    ("nn.gru", "bidirectional", 1, False, True, False, False, {}, "bfloat16", (3, 2, 2, 2)),
    ("nn.gru", "forward", 0, True, True, True, False, {}, "float32", (3, 2, 5, 131)),  # guarded gate blocks, parallel
    ("nn.lstm", "forward", 0, True, True, True, True, {}, "float32", (7, 2, 3, 5)),
    ("nn.lstm", "reverse", 1, True, False, True, False, dict(input_forget=1, clip=2.0), "float32", (4, 3, 2, 3)),
    ("nn.lstm", "bidirectional", 0, True, True, True, True, {}, "float64", (5, 3, 4, 13)),
    ("nn.lstm", "bidirectional", 1, True, True, True, True, ACTS_A, "float32", (3, 3, 2, 4)),
    ("nn.lstm", "bidirectional", 0, False, False, False, False, ACTS_B, "float16", (2, 1, 3, 2)),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[8]}-{k}" for k, c in enumerate(CASES)])
def test_compiled_matches_reference(case):
    op, direction, layout, bias, lens, init, peep, extra, dtype, sizes = case
    nd = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(len(op) + sizes[0])
    arrays = _arrays(op, sizes, nd, dtype, layout, bias, lens, init, peep, rng)
    _check(op, dict(direction=direction, layout=layout, **extra), arrays)


def test_symbolic_sequence_and_batch_one_kernel_for_every_size():
    rng = np.random.default_rng(3)
    dims = {0: (SizeVar("seq"), SizeVar("batch"), 3), 4: (SizeVar("batch"),)}
    runs = [_arrays("nn.gru", (t, b, 3, 5), 2, "float32", 0, True, True, False, False, rng)
            for t, b in ((4, 3), (1, 1), (7, 2))]
    runs = [r[:1] + runs[0][1:4] + r[4:] for r in runs]  # one set of weights (the constants)
    _check("nn.gru", dict(direction="bidirectional"), runs[0], dims, runs)


def test_kernel_is_one_serial_time_loop_around_vectorized_nests():
    from kiln.compiler.fuse import fuse
    from kiln.compiler.lower import lower_groups
    from kiln.transform import PassContext

    rng = np.random.default_rng(4)
    arrays = _arrays("nn.lstm", (6, 2, 3, 16), 2, "float32", 0, True, True, True, True, rng)
    ctx = PassContext(2, disabled=("split-rnn-projection",))  # the full op's kernel, projection inside
    kernels, _, host = lower_groups(fuse(_module("nn.lstm", dict(direction="bidirectional"), arrays), ctx=ctx))
    assert not host and len(kernels) == 1
    loops = [s for s in walk(kernels[0].func.body) if isinstance(s, tir.For)]
    time = [s for s in loops if s.loop_var.name == "nn_lstm_t"]
    assert len(time) == 1 and time[0].kind is tir.ForKind.SERIAL
    inside = [s for s in walk(time[0].body) if isinstance(s, tir.For)]
    assert not any(s.loop_var.name == "nn_lstm_t" for s in inside)
    assert sum(s.kind is tir.ForKind.VECTORIZED for s in inside) >= 3  # gate matmul, cell, hidden
    # the gate buffer is allocated once, outside the loop; inside only small per-task accumulators
    allocs = [s for s in walk(kernels[0].func.body) if isinstance(s, tir.Allocate)]
    assert any(a.buffer.name == "rnn_hr" for a in allocs)
    for a in walk(time[0].body):
        if isinstance(a, tir.Allocate):
            assert a.buffer.scope == "local" and all(isinstance(d, tir.IntImm) for d in a.buffer.shape), a.buffer


@pytest.mark.parametrize("attrs,match", [(dict(activations=("Tanh", "Bogus")), "unknown activation"),
                                         (dict(direction="bidirectional", activations=("Tanh", "Tanh", "Tanh")),
                                          "needs 4 activations")])
def test_bad_activations_raise_compute_error(attrs, match):
    from kiln import te
    from kiln.topi import compute_call

    nd = 2 if attrs.get("direction") == "bidirectional" else 1
    arrays = _arrays("nn.gru", (2, 1, 2, 2), nd, "float32", 0, False, False, False, False, np.random.default_rng(0))
    call = get_op("nn.gru")(*(Constant(a) for a in arrays), **attrs)
    ins = [te.placeholder(a.shape, "float32", f"x{k}") for k, a in enumerate(arrays)]
    with pytest.raises(ComputeError, match=match):
        compute_call("nn.gru", call.attrs, ins, call.type, [None] * len(ins))


def test_hidden_size_unknown_at_compile_time_raises_compute_error():
    from kiln import te
    from kiln.topi import compute_call

    n = tir.Var("n")
    x, w = te.placeholder((2, 1, 3), "float32", "x"), te.placeholder((1, 2, 3), "float32", "w")
    r = te.placeholder((1, 2, n), "float32", "r")
    call = get_op("nn.rnn")(*(Constant(np.zeros(s, np.float32)) for s in ((2, 1, 3), (1, 2, 3), (1, 2, 2))))
    with pytest.raises(ComputeError, match="hidden_size must be known"):
        compute_call("nn.rnn", call.attrs, [x, w, r], call.type, [None] * 3)
