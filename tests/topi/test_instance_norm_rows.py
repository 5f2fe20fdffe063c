"""Instance and group normalization over static images through the vectorized rows of kiln/topi/x86_rowwise.py
(lanes along the last axis, the other spatial axes as reduce loops), compiled, against the reference;
shapes that do not fit lanes keep the general compute."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import te
from kiln.codegen.c_source import generate
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import build_graph_executor as build
from kiln.compiler.lower import lower_groups
from kiln.op import get_op
from kiln.topi.x86_rowwise import NAMES, instance_eligible
from tests.codegen.conftest import requires_gcc
from tests.helpers import one_op_module

pytestmark = requires_gcc


@pytest.mark.parametrize("shape", [(1, 8, 64), (2, 3, 4, 16), (1, 5, 3, 2, 8), (1, 1, 32), (3, 7, 1, 6)])
def test_compiled_instance_norm_matches_reference(shape):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    scale, bias = rng.standard_normal(shape[1]).astype(np.float32), rng.standard_normal(shape[1]).astype(np.float32)
    mod = one_op_module("nn.instance_normalization", [x, scale, bias], epsilon=1e-5)
    cm = build(mod)
    assert cm.host_groups == []
    got = cm.run({"x0": x, "x1": scale, "x2": bias})[0]
    op = get_op("nn.instance_normalization")
    want = op.reference(op.attrs_type(epsilon=1e-5), x, scale, bias)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    kernels, _, _ = lower_groups(fuse(mod))
    assert NAMES[0] in generate([k.func for k in kernels]).code  # the lane statistics of the rows path


def test_which_shapes_take_the_rows_path():
    def ph(*shape):
        return te.placeholder(shape, "float32", "x")

    assert instance_eligible(ph(1, 8, 64), "float32")
    assert instance_eligible(ph(2, 3, 4, 16), "float32")
    assert not instance_eligible(ph(2, 3, 5), "float32")  # 5 has no lane count
    assert not instance_eligible(ph(2, 3), "float32")
    assert not instance_eligible(ph(1, 8, 64), "float16")


@pytest.mark.parametrize("shape, groups", [((1, 64, 8, 8), 8), ((2, 6, 3, 16), 3), ((1, 5, 32), 5), ((1, 4, 2, 2, 4), 1)])
def test_compiled_group_norm_matches_reference(shape, groups):
    rng = np.random.default_rng(sum(shape) + groups)
    x = (rng.standard_normal(shape) * 2 - 1).astype(np.float32)
    scale, bias = rng.standard_normal(shape[1]).astype(np.float32), rng.standard_normal(shape[1]).astype(np.float32)
    mod = one_op_module("nn.group_normalization", [x, scale, bias], num_groups=groups, epsilon=1e-5)
    cm = build(mod)
    assert cm.host_groups == []
    got = cm.run({"x0": x, "x1": scale, "x2": bias})[0]
    op = get_op("nn.group_normalization")
    want = op.reference(op.attrs_type(num_groups=groups, epsilon=1e-5), x, scale, bias)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    kernels, _, _ = lower_groups(fuse(mod))
    assert NAMES[0] in generate([k.func for k in kernels]).code
