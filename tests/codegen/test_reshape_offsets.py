"""A reshape fused with elementwise ops reads its input at the flat offset of its unraveled index: the C
backend simplifies that offset under the loop bounds, so a reshape merging [24, 48, 68] into [6, 13056]
reads p0[16x + i], not p0[x / 204 * 3264 + (16x + i) / 68 % 48 * 68 + (16x + i) % 68] (15x slower).
Randomized reshapes of odd sizes (primes, ones) fused with elementwise ops match numpy."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kiln import tir
from kiln.codegen.c_source import generate
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import build_graph_executor as build
from kiln.compiler.lower import lower_groups
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.op import get_op
from kiln.tir import FloorDiv, FloorMod, IntImm
from tests.codegen.conftest import requires_gcc

pytestmark = requires_gcc


def _reshape(x, shape):
    return get_op("tensor.reshape")(x, Constant(np.array(shape, np.int64)))


def _kernels_c(mod: IRModule) -> str:
    kernels, _, host = lower_groups(fuse(mod, 3))
    assert host == []
    return generate([k.func for k in kernels]).code


def _run(mod: IRModule, x: np.ndarray) -> np.ndarray:
    cm = build(mod, 3)
    assert cm.host_groups == []
    return cm.run({"x": x})[0]


def test_merged_dims_reshape_reads_the_plain_flat_index():
    x = Var("x", TensorType((1, 24, 48, 68), "float32"))
    mod = IRModule({"main": Function((x,), get_op("nn.relu")(_reshape(x, (1, 6, -1))))})
    code = _kernels_c(mod)
    loads = re.findall(r"p0\[([^\]]*)\]", code)
    assert loads and not any("floor" in at for at in loads), loads
    xv = np.random.default_rng(0).standard_normal((1, 24, 48, 68)).astype(np.float32)
    np.testing.assert_array_equal(_run(mod, xv), np.maximum(xv.reshape(1, 6, -1), 0))


@pytest.mark.parametrize("via_let", [False, True])
def test_offsets_simplify_under_loop_and_let_bounds(compile_fn, via_let):
    """out[x // 204, (16x + i) // 68 % 48, (16x + i) % 68] is out[16x + i] only because x < 4896 and i < 16
    (the loops' extents, or a let binding the loop variable: its value's bound)."""
    x, i, v = tir.Var("x"), tir.Var("i"), tir.Var("v")
    src, out = tir.Buffer("src", (IntImm(78336),), "float32"), tir.Buffer("out", (IntImm(24), IntImm(48), IntImm(68)),
                                                                            "float32")
    xv = v if via_let else x
    y = xv * 16 + i
    store = tir.BufferStore(out, src[y], (FloorDiv(xv, IntImm(204)), FloorMod(FloorDiv(y, IntImm(68)), IntImm(48)),
                                          FloorMod(y, IntImm(68))))
    body = tir.For(i, IntImm(0), IntImm(16), tir.ForKind.SERIAL, store)
    body = tir.For(x, IntImm(0), IntImm(4896), tir.ForKind.SERIAL, tir.LetStmt(v, x, body) if via_let else body)
    fn = tir.PrimFunc("copy", (src, out), body)
    code = generate([fn]).code
    assert not re.findall(r"out\[[^\]]*floor", code), code
    a, o = np.arange(78336, dtype=np.float32), np.empty((24, 48, 68), np.float32)
    compile_fn(fn)(a, o)
    np.testing.assert_array_equal(o.reshape(-1), a)


def test_group_norm_reshapes_leave_no_division_in_offsets():
    """Reshape -> instance norm -> reshape back -> scale and shift, as torch exports GroupNorm."""
    x = Var("x", TensorType((1, 24, 48, 68), "float32"))
    rng = np.random.default_rng(1)
    y = get_op("nn.instance_normalization")(_reshape(x, (1, 6, -1)), Constant(np.ones(6, np.float32)),
                                   Constant(np.zeros(6, np.float32)), epsilon=1e-5)
    gamma, beta = (rng.uniform(0.5, 1.5, (24, 1, 1)).astype(np.float32) for _ in range(2))
    y = get_op("nn.relu")(get_op("math.add")(get_op("math.mul")(_reshape(y, (1, 24, 48, 68)), Constant(gamma)),
                                        Constant(beta)))
    mod = IRModule({"main": Function((x,), y)})
    code = _kernels_c(mod)
    offsets = re.findall(r"\b(?:p0|relu|reshape)\w*\[([^\]]*)\]", code)
    assert offsets and not any("floor" in at for at in offsets), offsets
    xv = rng.standard_normal((1, 24, 48, 68)).astype(np.float32)
    g = xv.reshape(1, 6, -1)
    n = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(xv.shape)
    np.testing.assert_allclose(_run(mod, xv), np.maximum(n * gamma + beta, 0), rtol=1e-4, atol=1e-4)


def _factor(n: int, rng: np.random.Generator) -> list[int]:
    """n as a product of 1 to 4 factors in random order, ones sprinkled in."""
    out = []
    for p in (2, 3, 5, 7, 11, 13, 17):
        while n % p == 0:
            out.append(p)
            n //= p
    out += [n] if n > 1 else []
    rng.shuffle(out)
    k = int(rng.integers(1, min(4, len(out)) + 1)) if out else 1
    cuts = sorted(rng.choice(np.arange(1, len(out)), size=min(k - 1, len(out) - 1), replace=False)) if out else []
    parts = [int(np.prod(g)) for g in np.split(np.array(out, np.int64), cuts)] if out else [1]
    for _ in range(int(rng.integers(0, 2))):
        parts.insert(int(rng.integers(0, len(parts) + 1)), 1)
    return parts


@pytest.mark.parametrize("seed", range(12))
def test_random_reshapes_fused_with_elementwise_match_numpy(seed):
    rng = np.random.default_rng(seed)
    size = int(np.prod(rng.choice([1, 2, 3, 4, 5, 7, 8, 13, 16, 17], size=3)))
    src, mid = _factor(size, rng), _factor(size, rng)
    x = Var("x", TensorType(tuple(src), "float32"))
    shift = rng.standard_normal(mid[-1:]).astype(np.float32)
    y = get_op("nn.relu")(get_op("math.add")(_reshape(get_op("math.neg")(x), mid), Constant(shift)))
    y = get_op("math.mul")(_reshape(y, src[::-1]), Constant(np.float32(2.0)))
    mod = IRModule({"main": Function((x,), y)})
    loads = re.findall(r"p0\[([^\]]*)\]", _kernels_c(mod))
    assert loads and not any("floor" in at for at in loads), loads  # both reshapes keep the flat index
    xv = rng.standard_normal(src).astype(np.float32)
    want = (np.maximum((-xv).reshape(mid) + shift, 0).reshape(src[::-1]) * 2).astype(np.float32)
    np.testing.assert_array_equal(_run(mod, xv), want, err_msg=f"{src} -> {mid} -> {src[::-1]}")
