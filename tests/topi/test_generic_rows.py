"""The generic schedule keeps a short innermost row whole when the vector does not divide it: a
channel shuffle (reshape > transpose > reshape, as ShuffleNet exports it) then indexes its rows
without a ragged last vector, whose bound the simplifier cannot see through. Values match numpy at
odd widths around the vector and the WHOLE_ROW limit."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.op import get_op
from kiln.topi.schedule_generic import WHOLE_ROW

pytestmark = pytest.mark.usefixtures("fresh_cache")


def _shuffle(c: int, h: int, w: int, groups: int) -> IRModule:
    x = Var("x", TensorType((1, c, h, w), "float32"))
    y = get_op("tensor.reshape")(x, Constant(np.array([1, groups, c // groups, h, w], np.int64)))
    y = get_op("tensor.transpose")(y, perm=(0, 2, 1, 3, 4))
    y = get_op("tensor.reshape")(y, Constant(np.array([1, c, h, w], np.int64)))
    return IRModule({"main": Function((x,), get_op("nn.relu")(y))})


def _kernels(compiled) -> str:
    code = compiled.runner.library.source.code
    return code[code.index("kiln:unit"):]


@pytest.mark.parametrize("w", [5, 9, 28, 63, WHOLE_ROW, WHOLE_ROW + 1, 100])
def test_channel_shuffle_matches_numpy(w):
    c, h, g = 12, 3, 2
    compiled = kiln.build(_shuffle(c, h, w, g), executor="aot")
    x = np.random.default_rng(w).standard_normal((1, c, h, w)).astype(np.float32)
    want = np.maximum(x.reshape(1, g, c // g, h, w).transpose(0, 2, 1, 3, 4).reshape(1, c, h, w), 0)
    np.testing.assert_array_equal(compiled.run({"x": x})[0], want)
    if 8 < w <= WHOLE_ROW and w % 8:
        assert "kiln_min_i64" not in _kernels(compiled)  # one whole row: no ragged vector bound


def test_blocked_rows_keep_their_width_loop_plain():
    """A concat of two NCHW8c tensors: the 8-lane channel block is the row, the width (a prime, 13) a
    plain loop around it inside the parallel (n, c, h) loop: no division per vector."""
    xs = [Var(f"x{i}", TensorType((1, 3, 5, 13, 8), "float32")) for i in range(2)]
    y = get_op("nn.relu")(get_op("tensor.concat")(*xs, axis=1))
    compiled = kiln.build(IRModule({"main": Function(tuple(xs), y)}), executor="aot")
    rng = np.random.default_rng(0)
    feeds = {x.name: rng.standard_normal((1, 3, 5, 13, 8)).astype(np.float32) for x in xs}
    np.testing.assert_array_equal(compiled.run(feeds)[0], np.maximum(np.concatenate([feeds["x0"], feeds["x1"]], 1), 0))
    assert re.search(r"for \(int64_t \w+ = 0LL; \w+ < 13LL; \+\+\w+\)", _kernels(compiled))


@pytest.mark.parametrize("w, host, lanes", [(12, 16, None), (208, 8, 8), (208, 16, 16), (200, 16, 8), (201, 16, 16)])
def test_long_rows_split_into_host_vectors(w, host, lanes, monkeypatch):
    """A row longer than WHOLE_ROW is split into vectors of the host's float32 lanes (16 with AVX-512,
    else 8), or 8 where only 8 divides the row; a row of 8 to 15 still runs as one simd loop when the
    lanes are 16."""
    target = dataclasses.replace(kiln.Target.host(), vector_bits=host * 32)
    x = Var("x", TensorType((3, w), "float32"))
    compiled = kiln.build(IRModule({"main": Function((x,), get_op("nn.sigmoid")(x))}), target, executor="aot")
    v = np.random.default_rng(w).standard_normal((3, w)).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": v})[0], 1 / (1 + np.exp(-v)), rtol=2e-7, atol=1e-7)
    code = _kernels(compiled)
    assert "#pragma omp simd" in code
    if w > WHOLE_ROW:
        assert re.search(rf"< (kiln_min_i64\(.*, )?{lanes}LL\)?; \+\+\w+\) {{", code.split("#pragma omp simd")[1])
