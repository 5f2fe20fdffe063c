"""The fast-math operators (max error over float32, special values) and the fast-math pass."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
import kiln.transform.fast_math  # registers the pass and the fast ops
from kiln.ir import Function, IRModule, SizeVar, TensorType, Var
from kiln.op import get_op
from kiln.op.elemwise import np_erf
from kiln.transform import PASSES, PassContext
from tests.transform.golden import assert_golden, run_pass

F32 = np.finfo(np.float32)
FAST = PASSES["fast-math"]
ASK = {"required": ["fast-math"]}  # opt_level 4: runs only when asked


def _sweep() -> np.ndarray:
    """Every 4099th float32 bit pattern (all binades, subnormals included) plus a dense grid."""
    bits = np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    grid = np.linspace(-12, 12, 400_001, dtype=np.float32)
    return np.concatenate([bits[np.isfinite(bits)], grid, np.random.default_rng(0).standard_normal(100_000, np.float32)])


X = _sweep()
X64 = X.astype(np.float64)


def _gelu64(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np_erf(x / math.sqrt(2)))


def _errors(got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    got = got.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf where both overflow
        return np.abs(got - want), np.abs(got - want) / np.maximum(np.abs(want), 1e-300)


def _run(op: str, x: np.ndarray, **attrs) -> np.ndarray:
    o = get_op(op)
    a = o.attrs_type(**attrs) if o.attrs_type else None
    return o.reference(a, x)


def test_fast_exp_max_error():
    with np.errstate(all="ignore"):
        want = np.exp(X64)
    ab, rel = _errors(_run("math.fast_exp", X), want)
    normal = (want >= F32.tiny) & (want <= F32.max)
    assert rel[normal].max() <= 8.1e-8
    assert ab[want < F32.tiny].max() <= 1.1e-45
    assert np.all(np.isposinf(_run("math.fast_exp", X[want > F32.max])))


def test_fast_tanh_max_error():
    ab, rel = _errors(_run("math.fast_tanh", X), np.tanh(X64))
    assert ab.max() <= 3.6e-7 and rel[X != 0].max() <= 3.6e-7
    assert np.abs(_run("math.fast_tanh", X)).max() <= 1.0


def test_fast_erf_max_error():
    ab, rel = _errors(_run("math.fast_erf", X), np_erf(X64))
    assert ab.max() <= 4.3e-7
    assert rel[np.abs(X) >= F32.tiny].max() <= 4.3e-7
    assert np.abs(_run("math.fast_erf", X)).max() <= 1.0


def test_fast_sigmoid_max_error():
    with np.errstate(all="ignore"):
        want = 1 / (1 + np.exp(-X64))
    ab, rel = _errors(_run("nn.fast_sigmoid", X), want)
    assert ab.max() <= 8.9e-8
    assert rel[want >= F32.tiny].max() <= 1.5e-7


@pytest.mark.parametrize("approximate, small, big", [("none", 1.1e-6, 2.7e-7), ("tanh", 7.4e-7, 2.4e-7)])
def test_fast_gelu_max_error(approximate, small, big):
    x = X[np.abs(X) < 1e12]  # x^3 of the tanh form overflows beyond; checked with the specials
    with np.errstate(all="ignore"):
        want = _gelu64(x.astype(np.float64), approximate)
    ab, rel = _errors(_run("nn.fast_gelu", x, approximate=approximate), want)
    assert ab[np.abs(want) < 1].max() <= small
    assert rel[np.abs(want) >= 1].max() <= big


SPECIALS = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, F32.max, -F32.max, F32.tiny, -F32.tiny,
                     1e-45, -1e-45, 88.7, 88.8, -87.3, -103.9, -104.1, 9.5, -9.5, 4.5, -4.5, 1e12, -1e12],
                    np.float32)
PAIRS = [("math.fast_exp", "math.exp", {}), ("math.fast_tanh", "math.tanh", {}), ("math.fast_erf", "math.erf", {}),
         ("nn.fast_sigmoid", "nn.sigmoid", {}), ("nn.fast_gelu", "nn.gelu", {}),
         ("nn.fast_gelu", "nn.gelu", {"approximate": "tanh"})]


@pytest.mark.parametrize("fast, exact, attrs", PAIRS)
def test_fast_ops_on_special_values(fast, exact, attrs):
    got, want = _run(fast, SPECIALS, **attrs), _run(exact, SPECIALS, **attrs)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("fast, exact, attrs", PAIRS)
def test_fast_ops_on_narrow_floats_within_one_ulp_plus_float32_error(dtype, fast, exact, attrs):
    x = np.concatenate([np.linspace(-10, 10, 2001), [np.inf, -np.inf, np.nan]]).astype(kiln.ir.dtype.to_numpy(dtype))
    got, want = _run(fast, x, **attrs), _run(exact, x, **attrs)
    assert got.dtype == x.dtype
    g, w = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = np.isfinite(w)
    ulp = np.abs(np.nextafter(want[ok], np.full_like(want[ok], np.inf)).astype(np.float32) - w[ok])
    assert np.all(np.abs(g[ok] - w[ok]) <= ulp * 1.001 + 1.1e-6 * np.maximum(1, np.abs(w[ok])))


def test_fast_op_type_relation_keeps_type_and_rejects_float64():
    x = Var("x", TensorType((SizeVar("n"), 3), "float32"))
    assert get_op("math.fast_exp")(x).type == x.type
    with pytest.raises(kiln.errors.TypeInferenceError):
        get_op("math.fast_exp")(Var("y", TensorType((2,), "float64")))


T = "Tensor[(n, 7), float32]"


def test_fast_math_golden_rewrites_each_op():
    assert_golden(FAST, f"""
def @main(%x: {T}, %d: Tensor[(3,), float64]) -> ({T}, Tensor[(3,), float64]) {{
  %0 = math.exp(%x);
  %1 = math.tanh(%0);
  %2 = math.erf(%1);
  %3 = nn.sigmoid(%2);
  %4 = nn.gelu(%3, approximate="tanh");
  %5 = nn.gelu(%4);
  %6 = math.exp(%d);
  (%5, %6)
}}""", f"""
def @main(%x: {T}, %d: Tensor[(3,), float64]) -> ({T}, Tensor[(3,), float64]) {{
  %0 = math.fast_exp(%x);
  %1 = math.fast_tanh(%0);
  %2 = math.fast_erf(%1);
  %3 = nn.fast_sigmoid(%2);
  %4 = nn.fast_gelu(%3, approximate="tanh");
  %5 = nn.fast_gelu(%4);
  %6 = math.exp(%d);
  (%5, %6)
}}""", **ASK)


def test_fast_math_runs_only_when_asked():
    src = f"def @main(%x: {T}) -> {T} {{\n  math.exp(%x)\n}}"
    mod = kiln.ir.parse(src)
    assert run_pass(FAST, mod, opt_level=3) is mod
    out = run_pass(FAST, mod, opt_level=2, required=["fast-math"])
    assert "math.fast_exp" in kiln.ir.text(out)


def test_fast_math_differential_small_graph():
    src = """
def @main(%x: Tensor[(b, 13), float32], %w: Tensor[(13, 5), float32]) -> Tensor[(b, 5), float32] {
  %0 = linalg.mat_mul(%x, %w);
  %1 = nn.gelu(%0);
  %2 = nn.sigmoid(%1);
  %3 = math.tanh(%0);
  %4 = math.mul(%2, %3);
  %5 = math.erf(%4);
  math.exp(%5)
}"""
    mod = kiln.ir.parse(src)
    out = run_pass(FAST, mod, **ASK)
    assert "math.exp(" not in kiln.ir.text(out)
    rng = np.random.default_rng(1)
    for b in (1, 3, 17):
        feeds = {"x": rng.standard_normal((b, 13), np.float32) * 3, "w": rng.standard_normal((13, 5), np.float32)}
        np.testing.assert_allclose(kiln.evaluate(out, feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=3e-6, atol=3e-6)


def test_fast_math_on_a_deep_chain():
    x = Var("x", TensorType((2,), "float32"))
    y = x
    for i in range(10_000):
        y = get_op("math.tanh" if i % 2 else "nn.sigmoid")(y)
    out = run_pass(FAST, IRModule({"main": Function((x,), y)}), **ASK)
    assert out.functions["main"].body.op.name == "math.fast_tanh"
    v = np.array([0.3, -2.0], np.float32)
    np.testing.assert_allclose(kiln.evaluate(out, {"x": v})[0], kiln.evaluate(IRModule({"main": Function((x,), y)}), {"x": v})[0], rtol=1e-5)


def test_fast_math_in_required_context():
    with PassContext(required=["fast-math"]):
        out = FAST(kiln.ir.parse(f"def @main(%x: {T}) -> {T} {{\n  nn.sigmoid(%x)\n}}"))
    assert "nn.fast_sigmoid" in kiln.ir.text(out)
