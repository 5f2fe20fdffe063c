"""Random fused groups, compiled by the executor, against the interpreter (hypothesis-driven).

Two sources: the shared random-graph generator (odd static shapes from 1 and primes, broadcasts,
reductions, transposes, matmuls, 1x1 convs) and chains over a symbolic batch dim, where one build
must serve every batch size.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln
from kiln.compiler.lower import build_graph_executor as build
from kiln.ir import Constant, Function, IRModule, Var
from kiln.ir.types import ANY, SizeVar, TensorType
from kiln.op import get_op
from tests.codegen.conftest import requires_gcc
from tests.random_graphs import random_module

pytestmark = requires_gcc
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ODD = (1, 3, 5, 7, 13, 17, 31)


@pytest.fixture(scope="module", autouse=True)
def _private_compile_cache(tmp_path_factory):
    """Compile into a cache of this test session, never the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KILN_CACHE_DIR", str(tmp_path_factory.mktemp("kiln-cache")))
        yield


def _assert_compiled_matches(mod: IRModule, feeds_list: list[dict[str, np.ndarray]]) -> None:
    cm = build(mod)
    assert cm.host_groups == [], f"groups ran on the host: {cm.host_groups}"
    for feeds in feeds_list:
        with np.errstate(all="ignore"):
            want = kiln.evaluate(mod, feeds)
            got = cm.run(feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 16))
def test_random_graph_groups_match_interpreter(seed: int, steps: int) -> None:
    mod, feeds = random_module(seed, steps)
    _assert_compiled_matches(mod, [feeds])


UNARY = ("nn.relu", "math.neg", "math.tanh", "nn.sigmoid", "math.abs", "nn.softsign")
BINARY = ("math.add", "math.sub", "math.mul", "math.max")
STEP = st.sampled_from(("unary", "binary", "row", "reduce", "softmax", "matmul"))


@st.composite
def symbolic_chains(draw):
    """A chain over x: [n, c] (n symbolic), the constants drawn from a seed."""
    c = draw(st.sampled_from(ODD))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    x = Var("x", TensorType((SizeVar("n"), c), "float32"))
    y, width = x, c
    for kind in draw(st.lists(STEP, min_size=1, max_size=8)):
        if kind == "unary":
            y = get_op(draw(st.sampled_from(UNARY)))(y)
        elif kind == "binary":
            y = get_op(draw(st.sampled_from(BINARY)))(y, Constant(rng.standard_normal((width,)).astype(np.float32)))
        elif kind == "row":  # a per-row value broadcast back: a reduction feeding an elementwise op
            s = get_op("reduce.max")(y, Constant(np.array([1], np.int64)), keepdims=1)
            y = get_op("math.sub")(y, s)
        elif kind == "reduce":
            y, width = get_op("reduce.mean")(y, Constant(np.array([1], np.int64)), keepdims=1), 1
        elif kind == "softmax":
            y = get_op("reduce.softmax")(y, axis=1)
        else:
            m = draw(st.sampled_from(ODD))
            w = (rng.standard_normal((width, m)) / np.sqrt(width)).astype(np.float32)
            y, width = get_op("linalg.mat_mul")(y, Constant(w)), m
    return IRModule({"main": Function((x,), y)}), c


@SETTINGS
@given(chain=symbolic_chains(), batches=st.lists(st.sampled_from(ODD), min_size=2, max_size=2, unique=True))
def test_symbolic_batch_groups_match_interpreter(chain, batches: list[int]) -> None:
    mod, c = chain
    rng = np.random.default_rng(0)
    _assert_compiled_matches(mod, [{"x": rng.standard_normal((n, c)).astype(np.float32)} for n in batches])


def test_broadcast_between_unknown_dims() -> None:
    """Which unknown (?) dims broadcast is decided by the data: the (2, 4, 1) operand reads index 0 on its unit dim."""
    a, b = (Var(n, TensorType((ANY, ANY, ANY), "float32")) for n in "ab")
    mod = IRModule({"main": Function((a, b), get_op("math.mul")(a, b))})
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((2, 4, 8)).astype(np.float32),
             "b": rng.standard_normal((2, 4, 1)).astype(np.float32)}
    _assert_compiled_matches(mod, [feeds])
