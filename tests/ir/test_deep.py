"""10,000-node graphs: nothing in the IR layer may recurse over expression depth."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import kiln
from kiln.ir import (
    Function,
    If,
    IRModule,
    Let,
    TensorType,
    Var,
    check_well_formed,
    parse,
    post_order,
    structural_equal,
    structural_hash,
    text_with_params,
)
from kiln.op.registry import REGISTRY

DEPTH = 10_000
T = TensorType((3,), "float32")
add, relu, neg = REGISTRY["math.add"], REGISTRY["nn.relu"], REGISTRY["math.neg"]


@pytest.fixture(autouse=True)
def low_recursion_limit():
    """Well below the depth, so any recursion over the chain fails loudly."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(800)
    yield
    sys.setrecursionlimit(old)


def chain_module() -> IRModule:
    x = Var("x", T)
    e = x
    for i in range(DEPTH):
        e = relu(e) if i % 2 else add(e, x)
    return IRModule({"main": Function((x,), e)})


def let_chain_module() -> IRModule:
    """A-normal form: `let %v1 = ...; let %v2 = ...; ...` nested 10,000 deep."""
    x = Var("x", T)
    vs = [Var(f"v{i}", T) for i in range(DEPTH)]
    body = vs[-1]
    for i in reversed(range(DEPTH)):
        prev = vs[i - 1] if i else x
        body = Let(vs[i], neg(prev), body)
    cond = Var("c", TensorType((), "bool"))
    return IRModule({"main": Function((x, cond), If(cond, body, x))})


@pytest.mark.parametrize("build, expect", [(chain_module, 1.0 + DEPTH // 2), (let_chain_module, 1.0)])
def test_deep_graph_everywhere(build, expect):
    m = build()
    assert len(post_order(m.main)) >= DEPTH
    s, params = text_with_params(m)
    back = parse(s, params)
    assert structural_equal(back, m)
    assert structural_hash(back) == structural_hash(m)
    check_well_formed(back)
    feeds = {"x": np.ones(3, np.float32)}
    if "c" in m.input_names:
        feeds["c"] = np.array(True)
    out = kiln.evaluate(back, feeds)
    np.testing.assert_allclose(out[0], np.full(3, expect))


def test_unequal_deep_chains():
    a, b = chain_module(), chain_module()
    x = b.main.params[0]
    changed = IRModule({"main": Function((x,), relu(b.main.body))})
    assert structural_equal(a, b)
    assert not structural_equal(a, changed)
