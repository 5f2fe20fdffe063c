"""ToMixedPrecision: golden rewrites, policy overrides, float32 islands, and differential tests.

Tolerances: float16 keeps 11 significant bits, bfloat16 8, so small networks here agree with
float32 to rtol/atol 2e-2 (float16) and 8e-2 (bfloat16) on unit-scale data.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.transform.fast_math  # registers fast-math
import kiln.transform.mixed_precision  # registers the pass
from kiln.ir import Call, Constant, Function, IRModule, SizeVar, TensorType, Tuple, TupleGetItem, Var
from kiln.ir.visitor import post_order
from kiln.op import get_op
from kiln.transform import PASSES, PassContext, Sequential
from kiln.transform.mixed_precision import NEVER_OPS
from tests.transform.golden import assert_golden, run_pass

AMP = PASSES["to-mixed-precision"]
TOL = {"float16": 2e-2, "bfloat16": 8e-2}


def amp(mod: IRModule, dtype: str = "float16", **config) -> IRModule:
    cfg = {"mixed_precision.dtype": dtype, **{f"mixed_precision.{k}": v for k, v in config.items()}}
    return run_pass(AMP, mod, required=["to-mixed-precision"], config=cfg)


def golden(before: str, expected: str, dtype: str = "float16", **config) -> IRModule:
    cfg = {"mixed_precision.dtype": dtype, **{f"mixed_precision.{k}": v for k, v in config.items()}}
    return assert_golden(AMP, before, expected, required=["to-mixed-precision"], config=cfg)


X = "Tensor[(n, 1, 5, 5), float32]"
Y = "Tensor[(n, 2, 4, 4), float32]"
W32 = "[1.0, -0.5, 0.25, 2.0, 0.5, 1.5, -1.0, 0.75]:float32(2, 1, 2, 2)"
W16 = "[1.0, -0.5, 0.25, 2.0, 0.5, 1.5, -1.0, 0.75]:float16(2, 1, 2, 2)"


def test_golden_conv_add_relu_in_low_precision_softmax_in_float32():
    golden(f"""
def @main(%x: {X}) -> {Y} {{
  %0 = nn.conv(%x, {W32});
  %1 = math.add(%0, [0.5, -0.25]:float32(2, 1, 1));
  %2 = nn.relu(%1);
  reduce.softmax(%2, axis=1)
}}""", f"""
def @main(%x: {X}) -> {Y} {{
  %0 = math.cast(%x, to="float16");
  %1 = nn.conv(%0, {W16});
  %2 = math.add(%1, [0.5, -0.25]:float16(2, 1, 1));
  %3 = nn.relu(%2);
  %4 = math.cast(%3, to="float32");
  reduce.softmax(%4, axis=1)
}}""")


def test_golden_output_dtype_kept_and_one_cast_per_value():
    golden("""
def @main(%x: Tensor[(3, 7), float32], %w: Tensor[(7, 5), float32], %v: Tensor[(7, 2), float32]) -> (Tensor[(3, 5), float32], Tensor[(3, 2), float32]) {
  %0 = linalg.mat_mul(%x, %w);
  %1 = linalg.mat_mul(%x, %v);
  (%0, %1)
}""", """
def @main(%x: Tensor[(3, 7), float32], %w: Tensor[(7, 5), float32], %v: Tensor[(7, 2), float32]) -> (Tensor[(3, 5), float32], Tensor[(3, 2), float32]) {
  %0 = math.cast(%x, to="float16");
  %1 = math.cast(%w, to="float16");
  %2 = linalg.mat_mul(%0, %1);
  %3 = math.cast(%2, to="float32");
  %4 = math.cast(%v, to="float16");
  %5 = linalg.mat_mul(%0, %4);
  %6 = math.cast(%5, to="float32");
  (%3, %6)
}""")


def test_golden_follow_falls_back_to_float32_when_a_float32_input_joins():
    golden("""
def @main(%x: Tensor[(b, 4), float32], %y: Tensor[(b, 4), float32]) -> Tensor[(b, 4), float32] {
  %0 = linalg.gemm(%x, [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]:float32(4, 4), transB=1);
  %1 = math.tanh(%0);
  math.add(%1, %y)
}""", """
def @main(%x: Tensor[(b, 4), float32], %y: Tensor[(b, 4), float32]) -> Tensor[(b, 4), float32] {
  %0 = math.cast(%x, to="float16");
  %1 = linalg.gemm(%0, [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]:float16(4, 4), transB=1);
  %2 = math.tanh(%1);
  %3 = math.cast(%2, to="float32");
  math.add(%3, %y)
}""")


def test_golden_constant_that_overflows_float16_keeps_op_in_float32_but_not_bfloat16():
    before = """
def @main(%q: Tensor[(2, 3), float32], %m: Tensor[(2, 3), bool]) -> Tensor[(2, 3), float32] {
  %0 = linalg.mat_mul(%q, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]:float32(3, 3));
  math.where(%m, %0, -1000000000.0:float32)
}"""
    golden(before, """
def @main(%q: Tensor[(2, 3), float32], %m: Tensor[(2, 3), bool]) -> Tensor[(2, 3), float32] {
  %0 = math.cast(%q, to="float16");
  %1 = linalg.mat_mul(%0, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]:float16(3, 3));
  %2 = math.cast(%1, to="float32");
  math.where(%m, %2, -1000000000.0:float32)
}""")
    out = amp(kiln.ir.parse(before), "bfloat16")
    assert "math.where(%m, %1, " in kiln.ir.text(out) and ":bfloat16)" in kiln.ir.text(out)


def test_golden_bfloat16_and_casts_in_the_source():
    golden("""
def @main(%x: Tensor[(2, 3), float32]) -> (Tensor[(2, 2), float32], Tensor[(2, 2), int32], Tensor[(2, 2), float16]) {
  %0 = linalg.mat_mul(%x, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]:float32(3, 2));
  %1 = math.cast(%0, to="float32");
  %2 = math.cast(%0, to="int32");
  %3 = math.cast(%0, to="float16");
  (%1, %2, %3)
}""", """
def @main(%x: Tensor[(2, 3), float32]) -> (Tensor[(2, 2), float32], Tensor[(2, 2), int32], Tensor[(2, 2), float16]) {
  %0 = math.cast(%x, to="bfloat16");
  %1 = linalg.mat_mul(%0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]:bfloat16(3, 2));
  %2 = math.cast(%1, to="float32");
  %3 = math.cast(%2, to="int32");
  %4 = math.cast(%1, to="float16");
  (%2, %3, %4)
}""", dtype="bfloat16")


def test_policy_override_from_config():
    src = f"""
def @main(%x: {X}) -> {Y} {{
  %0 = nn.conv(%x, {W32});
  math.exp(%0)
}}"""
    golden(src, src, policy={"nn.conv": "NEVER"})
    golden(src, f"""
def @main(%x: {X}) -> {Y} {{
  %0 = math.cast(%x, to="float16");
  %1 = nn.conv(%0, {W16});
  %2 = math.exp(%1);
  math.cast(%2, to="float32")
}}""", policy={"math.exp": "follow"})


def test_bad_config_is_rejected():
    mod = kiln.ir.parse(f"def @main(%x: {X}) -> {X} {{\n  nn.relu(%x)\n}}")
    with pytest.raises(ValueError, match="mixed_precision.dtype"):
        amp(mod, "float8_e4m3fn")
    with pytest.raises(ValueError, match="ALWAYS, FOLLOW or NEVER"):
        amp(mod, policy={"nn.relu": "SOMETIMES"})


def test_runs_only_when_asked():
    mod = kiln.ir.parse(f"def @main(%x: {X}) -> {Y} {{\n  nn.conv(%x, {W32})\n}}")
    assert run_pass(AMP, mod, opt_level=3) is mod


# ---------------------------------------------------------------------------------------------
# differential tests on small networks


def _const(rng, *shape, scale=None):
    scale = scale if scale is not None else 1 / np.sqrt(np.prod(shape[1:]) or 1)
    return Constant((rng.standard_normal(shape) * scale).astype(np.float32))


def cnn(rng) -> IRModule:
    """conv -> batchnorm -> relu -> maxpool -> conv(stride 2) -> global avg pool -> flatten -> gemm -> softmax."""
    x = Var("x", TensorType((SizeVar("n"), 3, 11, 11), "float32"))
    y = get_op("nn.conv")(x, _const(rng, 5, 3, 3, 3), _const(rng, 5, scale=0.1), pads=(1, 1, 1, 1))
    bn = [Constant(v.astype(np.float32)) for v in (rng.uniform(0.5, 1.5, 5), rng.standard_normal(5) * 0.1,
                                                   rng.standard_normal(5) * 0.1, rng.uniform(0.5, 2, 5))]
    y = get_op("nn.batch_normalization")(y, *bn)
    y = get_op("nn.relu")(y)
    y = TupleGetItem(get_op("nn.max_pool")(y, kernel_shape=(2, 2), strides=(2, 2)), 0)
    y = get_op("nn.conv")(y, _const(rng, 7, 5, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    y = get_op("nn.sigmoid")(y)
    y = get_op("nn.global_average_pool")(y)
    y = get_op("tensor.flatten")(y, axis=1)
    y = get_op("linalg.gemm")(y, _const(rng, 13, 7), _const(rng, 13, scale=0.1), transB=1)
    return IRModule({"main": Function((x,), get_op("reduce.softmax")(y, axis=1))})


def mlp(rng) -> IRModule:
    """matmul -> add -> gelu -> matmul -> add -> layer norm -> tanh, with a symbolic batch."""
    x = Var("x", TensorType((SizeVar("b"), 17), "float32"))
    y = get_op("math.add")(get_op("linalg.mat_mul")(x, _const(rng, 17, 31)), _const(rng, 31, scale=0.1))
    y = get_op("nn.gelu")(y)
    y = get_op("math.add")(get_op("linalg.mat_mul")(y, _const(rng, 31, 7)), _const(rng, 7, scale=0.1))
    y = TupleGetItem(get_op("nn.layer_normalization")(y, _const(rng, 7, scale=1.0), _const(rng, 7, scale=0.1)), 0)
    return IRModule({"main": Function((x,), get_op("math.tanh")(y))})


def attention(rng) -> IRModule:
    """Single-head attention: softmax(mask(q k^T / sqrt d)) v, then an output projection."""
    s, d = SizeVar("s"), 8
    x = Var("x", TensorType((s, d), "float32"))
    m = Var("m", TensorType((s, s), "bool"))
    q, k, v = (get_op("linalg.mat_mul")(x, _const(rng, d, d)) for _ in range(3))
    kt = get_op("tensor.transpose")(k, perm=(1, 0))
    scores = get_op("math.mul")(get_op("linalg.mat_mul")(q, kt), Constant(np.float32(1 / np.sqrt(d))))
    scores = get_op("math.where")(m, scores, Constant(np.float32(-1e9)))
    p = get_op("reduce.softmax")(scores, axis=-1)
    out = get_op("linalg.mat_mul")(get_op("linalg.mat_mul")(p, v), _const(rng, d, d))
    return IRModule({"main": Function((x, m), get_op("math.add")(out, x))})


def _feeds(mod: IRModule, rng, size: int) -> dict:
    feeds = {}
    for p in mod.functions["main"].params:
        shape = tuple(d if isinstance(d, int) else size for d in p.type.shape)
        feeds[p.name] = (rng.random(shape) > 0.3 if p.type.dtype == "bool"
                         else rng.standard_normal(shape).astype(np.float32))
    return feeds


def _dtypes(t) -> set[str]:
    return {t.dtype} if isinstance(t, TensorType) else set().union(*map(_dtypes, getattr(t, "fields", ())))


def _low_calls(mod: IRModule, low: str) -> set[str]:
    return {e.op.name for e in post_order(mod.functions["main"])
            if isinstance(e, Call) and e.op.name != "math.cast" and low in _dtypes(e.type)}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("model, size, expect_low", [
    (cnn, 1, {"nn.conv", "nn.sigmoid", "nn.global_average_pool", "tensor.flatten", "linalg.gemm"}),
    (cnn, 3, {"nn.conv", "linalg.gemm"}),
    (mlp, 5, {"linalg.mat_mul", "math.add", "nn.gelu"}),
    (mlp, 1, {"linalg.mat_mul"}),
    (attention, 7, {"linalg.mat_mul", "tensor.transpose", "math.mul"}),
])
def test_networks_match_float32(model, size, expect_low, dtype):
    rng = np.random.default_rng(size)
    mod = model(rng)
    out = amp(mod, dtype)
    f = out.functions["main"]
    assert f.type == mod.functions["main"].type  # signature (inputs and outputs) unchanged
    assert expect_low <= _low_calls(out, dtype)
    feeds = _feeds(mod, rng, size)
    want, got = kiln.evaluate(mod, feeds)[0], kiln.evaluate(out, feeds)[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("model", [cnn, mlp, attention])
def test_reductions_softmax_and_normalizations_stay_float32(model):
    out = amp(model(np.random.default_rng(0)))
    for e in post_order(out.functions["main"]):
        if isinstance(e, Call) and e.op.name in NEVER_OPS:
            assert _dtypes(e.type) == {"float32"}, e.op.name
            assert all(_dtypes(a.type) <= {"float32", "int64"} for a in e.args), e.op.name


def test_reductions_stay_float32_after_low_producers():
    src = f"""
def @main(%x: {X}) -> (Tensor[(n, 1, 1, 1), float32], Tensor[(n, 2, 1, 1), float32], Tensor[(n, 2, 4, 4), float32]) {{
  %0 = nn.conv(%x, {W32});
  %1 = reduce.sum(%0, [1, 2, 3]:int64(3,));
  %2 = reduce.mean(%0, [2, 3]:int64(2,));
  %3 = math.log(%0);
  (%1, %2, %3)
}}"""
    out = amp(kiln.ir.parse(src))
    calls = {e.op.name: e for e in post_order(out.functions["main"]) if isinstance(e, Call)}
    for name in ("reduce.sum", "reduce.mean", "math.log"):
        assert calls[name].args[0].type.dtype == "float32" and calls[name].type.dtype == "float32"
    assert calls["nn.conv"].type.dtype == "float16"


def test_a_normal_form_and_if_keep_meaning():
    src = """
def @main(%c: Tensor[(), bool], %x: Tensor[(k, 6), float32]) -> Tensor[(k, 3), float32] {
  %0 = linalg.mat_mul(%x, [0.5, -1.0, 0.25, 1.0, 0.75, -0.5, 2.0, 0.0, 1.0, -0.25, 0.5, 1.5, 1.0, 1.0, -1.0, 0.5, 0.0, 0.25]:float32(6, 3));
  if (%c) {
    nn.relu(%0)
  } else {
    reduce.softmax(%0, axis=1)
  }
}"""
    mod = run_pass(PASSES["to-a-normal-form"], kiln.ir.parse(src))
    out = amp(mod)
    text = kiln.ir.text(out)
    assert "float16" in text and "let" in text
    x = np.random.default_rng(3).standard_normal((13, 6)).astype(np.float32)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        np.testing.assert_allclose(kiln.evaluate(out, feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=2e-2, atol=2e-2)


def test_deep_chain_does_not_recurse():
    x = Var("x", TensorType((1, 4), "float32"))
    y = get_op("linalg.mat_mul")(x, Constant(np.eye(4, dtype=np.float32)))
    for i in range(10_000):
        y = get_op("nn.relu" if i % 2 else "math.neg")(y)
    mod = IRModule({"main": Function((x,), y)})
    out = amp(mod)
    assert out.functions["main"].body.op.name == "math.cast"
    assert out.functions["main"].body.args[0].type.dtype == "float16"
    v = np.array([[1.0, -2.0, 3.0, 0.5]], np.float32)
    np.testing.assert_allclose(kiln.evaluate(out, {"x": v})[0], kiln.evaluate(mod, {"x": v})[0])


def test_other_functions_keep_their_signatures():
    src = """
def @main(%x: Tensor[(2, 2), float32]) -> Tensor[(2, 2), float32] {
  %0 = linalg.mat_mul(%x, %x);
  @helper(%0)
}

def @helper(%y: Tensor[(2, 2), float32]) -> Tensor[(2, 2), float32] {
  %0 = linalg.mat_mul(%y, %y);
  nn.relu(%0)
}"""
    mod = kiln.ir.parse(src)
    with PassContext(required=["to-mixed-precision"]):
        out = AMP(mod)
    for name in ("main", "helper"):
        assert out.functions[name].type == mod.functions[name].type
    v = np.array([[1.0, -0.5], [0.25, 2.0]], np.float32)
    np.testing.assert_allclose(kiln.evaluate(out, {"x": v})[0], kiln.evaluate(mod, {"x": v})[0], rtol=1e-2)


UNARY = ["nn.relu", "math.tanh", "nn.sigmoid", "math.neg", "math.exp", "nn.gelu", "math.abs"]
BINARY = ["math.add", "math.mul", "math.sub", "linalg.mat_mul", "linalg.mat_mul"]


def random_graph(rng, n_nodes: int) -> IRModule:
    """A random DAG over (p, p) tensors mixing FOLLOW, ALWAYS and NEVER ops and shared values."""
    p = 7
    x = Var("x", TensorType((p, p), "float32"))
    w = _const(rng, p, p, scale=0.3)
    vals = [x, w, get_op("linalg.mat_mul")(x, w)]
    for _ in range(n_nodes):
        kind = rng.choice(4, p=[0.45, 0.35, 0.1, 0.1])
        a = vals[rng.integers(len(vals))]
        if kind == 0:
            vals.append(get_op(UNARY[rng.integers(len(UNARY))])(get_op("math.clip")(a, Constant(np.float32(-3)),
                                                                                   Constant(np.float32(3)))))
        elif kind == 1:
            vals.append(get_op(BINARY[rng.integers(len(BINARY))])(a, vals[rng.integers(len(vals))]))
        elif kind == 2:
            vals.append(get_op("reduce.softmax")(a, axis=int(rng.integers(2))))
        else:
            vals.append(get_op("tensor.transpose")(a, perm=(1, 0)))
    return IRModule({"main": Function((x,), Tuple(tuple(vals[2:])))})


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_match_float32(seed):
    rng = np.random.default_rng(seed)
    mod = random_graph(rng, 14)
    out = amp(mod)
    x = {"x": rng.uniform(-1, 1, (7, 7)).astype(np.float32)}
    for got, want in zip(kiln.evaluate(out, x), kiln.evaluate(mod, x)):
        np.testing.assert_allclose(got, want, rtol=5e-2, atol=5e-2 * max(1.0, float(np.abs(want).max())))


def test_with_fast_math_and_folding_in_one_pipeline():
    mod = mlp(np.random.default_rng(4))
    seq = Sequential(tuple(PASSES[n] for n in ("to-mixed-precision", "fast-math", "fold-constant")))
    out = run_pass(seq, mod, required=["to-mixed-precision", "fast-math"], config={"mixed_precision.dtype": "bfloat16"})
    text = kiln.ir.text(out)
    assert "nn.fast_gelu" in text and "math.fast_tanh" in text and "bfloat16" in text
    feeds = _feeds(mod, np.random.default_rng(5), 6)
    np.testing.assert_allclose(kiln.evaluate(out, feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=8e-2, atol=8e-2)
