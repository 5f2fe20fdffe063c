"""SimplifyInference: golden rewrites, shapes it must refuse, and before == after differentially."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.transform.simplify_inference import simplify_inference
from tests.transform.golden import assert_golden, run_pass

PASS = simplify_inference


def feeds_for(mod: kiln.ir.IRModule, sizes: dict[str, int], seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for p in mod.main.params:
        shape = tuple(d if isinstance(d, int) else sizes[d.name] for d in p.type.shape)
        x = rng.standard_normal(shape)
        if p.name in ("v", "var"):
            x = np.abs(x) + 0.1
        out[p.name] = x.astype(p.type.dtype)
    return out


def differential(src: str, sizes: dict[str, int], rtol=1e-5, atol=1e-6) -> kiln.ir.IRModule:
    before = kiln.ir.parse(src)
    after = run_pass(PASS, before)
    assert not kiln.ir.structural_equal(before, after), "the pass did not fire"
    feeds = feeds_for(before, sizes)
    for a, b in zip(kiln.evaluate(before, feeds), kiln.evaluate(after, feeds)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
    return after


def unchanged(src: str):
    before = kiln.ir.parse(src)
    assert kiln.ir.structural_equal(run_pass(PASS, before), before)


BN_CONST = """
def @main(%x: Tensor[(N, 2, 3, 3), float32]) -> Tensor[(N, 2, 3, 3), float32] {
  nn.batch_normalization(%x, [2.0, 8.0]:float32(2,), [1.0, 0.0]:float32(2,), [1.0, 2.0]:float32(2,),
                         [3.0, 15.0]:float32(2,), epsilon=1.0)
}"""


def test_batch_norm_with_constant_params_is_a_channel_affine():
    assert_golden(PASS, BN_CONST, """
def @main(%x: Tensor[(N, 2, 3, 3), float32]) -> Tensor[(N, 2, 3, 3), float32] {
  %0 = math.mul(%x, [1.0, 2.0]:float32(2, 1, 1));
  math.add(%0, [0.0, -4.0]:float32(2, 1, 1))
}""")
    differential(BN_CONST, {"N": 3})


BN_VARS = """
def @main(%x: Tensor[(N, 2, 3), float32], %s: Tensor[(2,), float32], %b: Tensor[(2,), float32],
          %m: Tensor[(2,), float32], %v: Tensor[(2,), float32]) -> Tensor[(N, 2, 3), float32] {
  nn.batch_normalization(%x, %s, %b, %m, %v, epsilon=0.5)
}"""


def test_batch_norm_with_runtime_params_is_arithmetic():
    assert_golden(PASS, BN_VARS, """
def @main(%x: Tensor[(N, 2, 3), float32], %s: Tensor[(2,), float32], %b: Tensor[(2,), float32],
          %m: Tensor[(2,), float32], %v: Tensor[(2,), float32]) -> Tensor[(N, 2, 3), float32] {
  %0 = math.add(%v, 0.5:float32);
  %1 = math.sqrt(%0);
  %2 = math.div(%s, %1);
  %3 = tensor.reshape(%2, [-1, 1]:int64(2,));
  %4 = math.mul(%x, %3);
  %5 = math.mul(%m, %2);
  %6 = math.sub(%b, %5);
  %7 = tensor.reshape(%6, [-1, 1]:int64(2,));
  math.add(%4, %7)
}""")
    differential(BN_VARS, {"N": 1})


@pytest.mark.parametrize("shape", [(1, 1), (2, 7), (3, 5, 1, 2, 3)])
def test_batch_norm_odd_shapes_differential(shape):
    c = shape[1]
    rng = np.random.default_rng(c)
    p = [rng.uniform(0.5, 1.5, c).astype(np.float32) for _ in range(4)]
    vec = ", ".join
    consts = [f"[{vec(repr(float(v)) for v in a)}]:float32({c},)" for a in p]
    t = f"Tensor[({', '.join(map(str, shape))}), float32]"
    differential(f"""
def @main(%x: {t}) -> {t} {{
  nn.batch_normalization(%x, {', '.join(consts)}, epsilon=0.001)
}}""", {})


def test_training_batch_norm_stays():
    unchanged("""
def @main(%x: Tensor[(4, 2), float32]) -> (Tensor[(4, 2), float32], Tensor[(2,), float32], Tensor[(2,), float32]) {
  nn.batch_normalization(%x, [1.0, 1.0]:float32(2,), [0.0, 0.0]:float32(2,), [0.0, 0.0]:float32(2,),
                         [1.0, 1.0]:float32(2,), training_mode=1)
}""")


def test_dropout():
    assert_golden(PASS, """
def @main(%x: Tensor[(3, 4), float32]) -> (Tensor[(3, 4), float32], Tensor[(3, 4), bool]) {
  %0 = nn.dropout(%x, [0.3]:float32(), [false]:bool());
  (%0.0, %0.1)
}""", """
def @main(%x: Tensor[(3, 4), float32]) -> (Tensor[(3, 4), float32], Tensor[(3, 4), bool]) {
  (%x, tensor.constant_of_shape([3, 4]:int64(2,), value=[true]:bool(1,)))
}""")
    # symbolic dims: the output goes, the mask (no static fill) stays; training mode stays
    assert_golden(PASS, """
def @main(%x: Tensor[(N, 4), float32], %t: Tensor[(), bool]) -> (Tensor[(N, 4), float32], Tensor[(N, 4), bool], Tensor[(N, 4), float32]) {
  %0 = nn.dropout(%x, [0.3]:float32());
  %1 = nn.dropout(%x);
  %2 = nn.dropout(%x, [0.5]:float32(), %t);
  (%0.0, %1.1, %2.0)
}""", """
def @main(%x: Tensor[(N, 4), float32], %t: Tensor[(), bool]) -> (Tensor[(N, 4), float32], Tensor[(N, 4), bool], Tensor[(N, 4), float32]) {
  %0 = nn.dropout(%x);
  %1 = nn.dropout(%x, [0.5]:float32(), %t);
  (%x, %0.1, %1.0)
}""")


LAYER_NORM = """
def @main(%x: Tensor[(N, 5, 8), float32], %g: Tensor[(8,), float32], %b: Tensor[(8,), float32]) -> Tensor[(N, 5, 8), float32] {
  %0 = reduce.mean(%x, [-1]:int64(1,));
  %1 = math.sub(%x, %0);
  %2 = math.pow(%1, [2.0]:float32());
  %3 = reduce.mean(%2, [2]:int64(1,));
  %4 = math.add(%3, [1e-05]:float32());
  %5 = math.sqrt(%4);
  %6 = math.div(%1, %5);
  %7 = math.mul(%6, %g);
  math.add(%7, %b)
}"""


def test_layer_norm_decomposition():
    assert_golden(PASS, LAYER_NORM, """
def @main(%x: Tensor[(N, 5, 8), float32], %g: Tensor[(8,), float32], %b: Tensor[(8,), float32]) -> Tensor[(N, 5, 8), float32] {
  %0 = nn.layer_normalization(%x, %g, %b, axis=2, epsilon=9.999999747378752e-06);
  %0.0
}""")
    differential(LAYER_NORM, {"N": 2})


def test_layer_norm_over_two_axes_with_square_by_mul_and_no_affine():
    src = """
def @main(%x: Tensor[(3, 5, 7), float64]) -> Tensor[(3, 5, 7), float64] {
  %0 = reduce.mean(%x, [1, 2]:int64(2,));
  %1 = math.sub(%x, %0);
  %2 = math.mul(%1, %1);
  %3 = reduce.mean(%2, [-2, -1]:int64(2,));
  %4 = math.add([0.001]:float64(1,), %3);
  %5 = math.sqrt(%4);
  %6 = math.reciprocal(%5);
  math.mul(%1, %6)
}"""
    assert_golden(PASS, src, """
def @main(%x: Tensor[(3, 5, 7), float64]) -> Tensor[(3, 5, 7), float64] {
  %0 = nn.layer_normalization(%x, [1.0]:float64(1,), axis=1, epsilon=0.001, stash_type="float64");
  %0.0
}""")
    differential(src, {}, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("axes1, axes2", [("[1]", "[1]"), ("[-1]", "[-2]"), ("[2]", "[1, 2]")])
def test_layer_norm_needs_the_same_trailing_axes(axes1, axes2):
    def const(axes):
        return f"{axes}:int64({axes.count(',') + 1},)"

    unchanged(LAYER_NORM.replace("reduce.mean(%x, [-1]:int64(1,))", f"reduce.mean(%x, {const(axes1)})").replace(
        "reduce.mean(%2, [2]:int64(1,))", f"reduce.mean(%2, {const(axes2)})"))


def test_layer_norm_whose_centered_value_is_shared_elsewhere_keeps_it():
    # %1 also feeds the output: layer norm is formed, the subtraction stays for its other user
    src = LAYER_NORM.replace("-> Tensor[(N, 5, 8), float32]", "-> (Tensor[(N, 5, 8), float32], Tensor[(N, 5, 8), float32])"
                             ).replace("math.add(%7, %b)\n}", "(math.add(%7, %b), %1)\n}")
    after = differential(src, {"N": 1})
    names = [getattr(e.op, "name", "") for e in kiln.ir.post_order(after.main) if isinstance(e, kiln.ir.Call)]
    assert "nn.layer_normalization" in names and "math.sub" in names


GELU = """
def @main(%x: Tensor[(N, 8), float32]) -> (Tensor[(N, 8), float32], Tensor[(N, 8), float32], Tensor[(N, 8), float32]) {
  %0 = math.div(%x, [1.4142135]:float32());
  %1 = math.erf(%0);
  %2 = math.add(%1, [1.0]:float32());
  %3 = math.mul(%x, %2);
  %4 = math.mul(%3, [0.5]:float32());
  %5 = math.pow(%x, [3.0]:float32());
  %6 = math.mul([0.044715]:float32(), %5);
  %7 = math.add(%x, %6);
  %8 = math.mul(%7, [0.7978846]:float32());
  %9 = math.tanh(%8);
  %10 = math.add([1.0]:float32(), %9);
  %11 = math.mul(%x, [0.5]:float32());
  %12 = math.mul(%11, %10);
  %13 = math.mul(%x, [0.70710677]:float32());
  %14 = math.erf(%13);
  %15 = math.add(%14, [1.0]:float32());
  %16 = math.mul(%15, [0.5]:float32());
  %17 = math.mul(%x, %16);
  (%4, %12, %17)
}"""


def test_gelu_forms():
    assert_golden(PASS, GELU, """
def @main(%x: Tensor[(N, 8), float32]) -> (Tensor[(N, 8), float32], Tensor[(N, 8), float32], Tensor[(N, 8), float32]) {
  (nn.gelu(%x), nn.gelu(%x, approximate="tanh"), nn.gelu(%x))
}""")
    differential(GELU, {"N": 3}, rtol=1e-5, atol=1e-6)


def test_gelu_lookalikes_stay():
    unchanged("""
def @main(%x: Tensor[(8,), float32], %y: Tensor[(8,), float32]) -> (Tensor[(8,), float32], Tensor[(8,), float32]) {
  %0 = math.div(%x, [1.5]:float32());
  %1 = math.erf(%0);
  %2 = math.add(%1, [1.0]:float32());
  %3 = math.mul(%x, %2);
  %4 = math.div(%y, [1.4142135]:float32());
  %5 = math.erf(%4);
  %6 = math.add(%5, [1.0]:float32());
  %7 = math.mul(%x, %6);
  (math.mul(%3, [0.5]:float32()), math.mul(%7, [0.5]:float32()))
}""")


ATTENTION = """
def @main(%q: Tensor[(B, 2, 5, 4), float32], %k: Tensor[(B, 2, 7, 4), float32], %v: Tensor[(B, 2, 7, 3), float32],
          %m: Tensor[(B, 1, 5, 7), float32]) -> Tensor[(B, 2, 5, 3), float32] {
  %0 = tensor.transpose(%k, perm=(0, 1, 3, 2));
  %1 = linalg.mat_mul(%q, %0);
  %2 = math.div(%1, [2.0]:float32());
  %3 = math.add(%2, %m);
  %4 = reduce.softmax(%3, axis=-1);
  linalg.mat_mul(%4, %v)
}"""


def test_softmax_attention():
    assert_golden(PASS, ATTENTION, """
def @main(%q: Tensor[(B, 2, 5, 4), float32], %k: Tensor[(B, 2, 7, 4), float32], %v: Tensor[(B, 2, 7, 3), float32],
          %m: Tensor[(B, 1, 5, 7), float32]) -> Tensor[(B, 2, 5, 3), float32] {
  %0 = nn.attention(%q, %k, %v, %m, scale=0.5);
  %0.0
}""")
    differential(ATTENTION, {"B": 2})


def test_attention_with_pretransposed_keys_and_no_mask():
    src = """
def @main(%q: Tensor[(1, 3, 1, 8), float32], %kt: Tensor[(1, 3, 8, 11), float32], %v: Tensor[(1, 3, 11, 8), float32]) -> Tensor[(1, 3, 1, 8), float32] {
  %0 = linalg.mat_mul(%q, %kt);
  %1 = math.mul(%0, [0.35355339]:float32());
  %2 = reduce.softmax(%1, axis=3);
  linalg.mat_mul(%2, %v)
}"""
    after = differential(src, {})
    assert "nn.attention" in kiln.ir.text(after) and "tensor.transpose" in kiln.ir.text(after)


@pytest.mark.parametrize("edit", [
    ("%m: Tensor[(B, 1, 5, 7), float32]", "%m: Tensor[(B, 1, 5, 1), float32]"),  # mask would be padded
    ("axis=-1", "axis=2"),  # softmax over queries
    ("%q: Tensor[(B, 2, 5, 4), float32]", "%q: Tensor[(B, 1, 5, 4), float32]"),  # broadcast heads
    ("[2.0]:float32()", "[-2.0]:float32()"),  # negative scale
])
def test_attention_lookalikes_stay(edit):
    unchanged(ATTENTION.replace(*edit))


def test_instance_and_group_norm_stay():
    unchanged("""
def @main(%x: Tensor[(2, 4, 3), float32]) -> (Tensor[(2, 4, 3), float32], Tensor[(2, 4, 3), float32]) {
  %0 = nn.instance_normalization(%x, [1.0, 1.0, 1.0, 1.0]:float32(4,), [0.0, 0.0, 0.0, 0.0]:float32(4,));
  %1 = nn.group_normalization(%x, [1.0, 1.0, 1.0, 1.0]:float32(4,), [0.0, 0.0, 0.0, 0.0]:float32(4,), num_groups=2);
  (%0, %1)
}""")


def test_ten_thousand_dropouts():
    from kiln.ir import Function, IRModule, TensorType, TupleGetItem, Var
    from kiln.op.registry import get_op

    x = Var("x", TensorType((3,), "float32"))
    e = x
    for _ in range(10_000):
        e = TupleGetItem(get_op("nn.dropout")(get_op("nn.relu")(e)), 0)
    after = run_pass(PASS, IRModule({"main": Function((x,), e)}))
    assert {getattr(n.op, "name", "") for n in kiln.ir.post_order(after.main) if isinstance(n, kiln.ir.Call)} == {
        "nn.relu"}


def _where_attention(keep: np.ndarray, fill: str, s: int = 5) -> str:
    flat = ", ".join("true" if b else "false" for b in keep.reshape(-1))
    return f"""
def @main(%q: Tensor[(B, 2, {s}, 4), float32], %k: Tensor[(B, 2, {s}, 4), float32], %v: Tensor[(B, 2, {s}, 3), float32]) -> Tensor[(B, 2, {s}, 3), float32] {{
  %0 = tensor.transpose(%k, perm=(0, 1, 3, 2));
  %1 = linalg.mat_mul(%q, %0);
  %2 = math.mul(%1, [0.5]:float32());
  %3 = math.where([{flat}]:bool({", ".join(map(str, keep.shape))}), %2, [{fill}]:float32());
  %4 = reduce.softmax(%3, axis=-1);
  linalg.mat_mul(%4, %v)
}}"""


@pytest.mark.parametrize("fill", ["-inf", "-3.4028235e+38", "-10000.0"])
def test_where_causal_mask_is_causal_attention(fill):
    after = differential(_where_attention(np.tril(np.ones((5, 5), bool)), fill), {"B": 2})
    text = kiln.ir.text(after)
    assert "nn.attention" in text and "is_causal=1" in text and "math.where" not in text


@pytest.mark.parametrize("keep", [np.tril(np.ones((5, 5), bool), -1) | np.eye(5, dtype=bool)[::-1],
                                  np.array([True, False, True, True, False]), np.ones((1, 2, 5, 5), bool) & (np.arange(5) < 4)])
def test_other_where_masks_become_additive_masks(keep):
    after = differential(_where_attention(keep, "-inf"), {"B": 2})
    text = kiln.ir.text(after)
    assert "nn.attention" in text and "is_causal" not in text and "math.where" not in text


@pytest.mark.parametrize("keep, fill", [(np.tril(np.ones((5, 5), bool)), "-1.0"),  # leaves probability
                                        (np.ones((5, 1), bool), "-inf")])  # a mask nn.attention would pad
def test_where_lookalikes_stay(keep, fill):
    unchanged(_where_attention(keep, fill))


def _added_mask_attention(mask: np.ndarray, s: int = 5) -> str:
    flat = ", ".join(repr(float(x)) if np.isfinite(x) else "-inf" for x in mask.reshape(-1))
    return f"""
def @main(%q: Tensor[(2, 2, {s}, 4), float32], %k: Tensor[(2, 2, {s}, 4), float32], %v: Tensor[(2, 2, {s}, 3), float32]) -> Tensor[(2, 2, {s}, 3), float32] {{
  %0 = tensor.transpose(%k, perm=(0, 1, 3, 2));
  %1 = linalg.mat_mul(%q, %0);
  %2 = math.add(%1, [{flat}]:float32({", ".join(map(str, mask.shape))}));
  %3 = reduce.softmax(%2, axis=-1);
  linalg.mat_mul(%3, %v)
}}"""


_CAUSAL_ADDED = np.where(np.tril(np.ones((5, 5), bool)), 0, -np.inf).astype(np.float32)


@pytest.mark.parametrize("mask, causal", [
    (_CAUSAL_ADDED, True),
    (np.stack([_CAUSAL_ADDED, _CAUSAL_ADDED])[:, None], True),  # (2, 1, 5, 5), causal in every batch
    (np.stack([_CAUSAL_ADDED, _CAUSAL_ADDED.T])[:, None], False),  # the second batch keeps the upper triangle
    (np.where(_CAUSAL_ADDED == 0, 0, -10.0).astype(np.float32), False),  # -10 leaves probability
    (np.where(np.tril(np.ones((5, 5), bool), -1) | (np.arange(5) == 0), 0, -np.inf).astype(np.float32),
     False),  # hides the diagonal past row 0
])
def test_added_causal_mask(mask, causal):
    after = differential(_added_mask_attention(mask), {})
    text = kiln.ir.text(after)
    assert "nn.attention" in text and ("is_causal=1" in text) == causal
