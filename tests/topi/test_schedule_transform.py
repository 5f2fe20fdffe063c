"""kiln.topi.schedule_transform: a transform out of a blocked layout (NCHW[x]c -> NCHW) reads each pixel's
channel block whole (unblock_nest: the block unrolled inside a vector of columns); shapes it cannot take
that way keep the row nest. Compiled results equal numpy's transpose either way."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.codegen.c_source import generate
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import build_graph_executor as build
from kiln.compiler.lower import lower_groups
from kiln.ir import Function, IRModule, TensorType, Var
from kiln.op import get_op
from kiln.transform import PassContext
from tests.topi.conftest import SCHEDULE_TEST

pytestmark = SCHEDULE_TEST
rng = np.random.default_rng(0)


def _module(xs, src: str, dst: str, sizes, dtype: str) -> IRModule:
    x = Var("x", TensorType(xs, dtype))
    attrs = {"sizes": sizes} if sizes else {}
    return IRModule({"main": Function((x,), get_op("tensor.layout_transform")(x, src_layout=src, dst_layout=dst,
                                                                              **attrs))})


@pytest.mark.parametrize("xs, src, sizes, dtype, whole", [
    ((2, 3, 4, 16, 8), "NCHW8c", None, "float32", True),  # batch 2, two vectors of columns
    ((1, 2, 3, 8, 16), "NCHW16c", None, "float32", True),  # AVX-512's block
    ((1, 2, 5, 8, 4), "NCHW4c", None, "int32", True),
    ((1, 2, 5, 7, 8), "NCHW8c", None, "float32", False),  # 7 columns: not whole vectors
    ((1, 3, 2, 8, 8), "NCHW8c", (0, 21, 0, 0), "float32", False),  # 21 classes cropped from 3 blocks
])
def test_unblocking_transform(xs, src, sizes, dtype, whole):
    mod = _module(xs, src, "NCHW", sizes, dtype)
    x = (rng.standard_normal(xs) * 10).astype(dtype)
    n, cb, h, w, c = xs
    want = x.transpose(0, 1, 4, 2, 3).reshape(n, cb * c, h, w)[:, :(sizes[1] if sizes else cb * c)]
    cm = build(mod, 2, PassContext(2))
    np.testing.assert_array_equal(cm.run({"x": x})[0], want)
    assert np.array_equal(kiln.evaluate(mod, {"x": x})[0], want)
    kernels, _, host = lower_groups(fuse(mod, 2))
    assert not host
    source = generate([k.func for k in kernels]).code
    stores = source.count("layout_transform[")
    # unblocked: one store per channel of the block in the column vector's body; the row nest: one vector
    # store, or its short column loop unrolled
    assert (stores == c) if whole else (stores in (1, w) and stores != c), source


@pytest.mark.parametrize("xs, dst, dtype, whole", [
    ((2, 16, 3, 16), "NCHW8c", "float32", True),  # batch 2, two blocks, two vectors of columns
    ((1, 6, 2, 8), "NCHW4c", "float64", True),  # 6 channels pad to 2 blocks of 4 (the pad lanes are 0)
    ((1, 16, 2, 8), "NCHW16c", "int32", True),
    ((1, 8, 3, 7), "NCHW8c", "float32", False),  # 7 columns: the block stays the vector
])
def test_blocking_transform(xs, dst, dtype, whole):
    mod = _module(xs, "NCHW", dst, None, dtype)
    x = (rng.standard_normal(xs) * 10).astype(dtype)
    n, c, h, w = xs
    b = int(dst[4:-1])
    cb = -(-c // b)
    padded = np.zeros((n, cb * b, h, w), dtype)
    padded[:, :c] = x
    want = padded.reshape(n, cb, b, h, w).transpose(0, 1, 3, 4, 2)
    cm = build(mod, 2, PassContext(2))
    np.testing.assert_array_equal(cm.run({"x": x})[0], want)
    kernels, _, host = lower_groups(fuse(mod, 2))
    assert not host
    source = generate([k.func for k in kernels]).code
    # blocked: one store per channel of the block in the column vector's body (a padded block's guard may
    # version that body); the row nest: one block vector
    stores = source.count("layout_transform[")
    assert (stores >= b and stores % b == 0) if whole else (stores == 1), source
