"""Layout operators (kiln.op.layout) and the ConvertLayout / AlterOpLayout passes."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import TypeInferenceError
from kiln.ir import ANY, Constant, Function, IRModule, SizeVar, TensorType, TupleGetItem, Var, parse, text
from kiln.op import get_op
from kiln.op import layout as L
from kiln.transform import PassContext, WellFormedCheck
from kiln.transform.layout import alter_op_layout, choose_block, convert_layout
from tests.transform.golden import assert_golden, run_pass

F32 = "float32"


def _rand(rng, *shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# operators


@pytest.mark.parametrize("c", [1, 3, 5, 8, 13, 16])
@pytest.mark.parametrize("dst", ["NHWC", "NCHW8c", "NCHW4c", "NCHW1c", "NHWC8c", "CHWN"])
def test_layout_transform_round_trip(c: int, dst: str) -> None:
    x = _rand(np.random.default_rng(c), 2, c, 3, 5)
    lt = get_op("tensor.layout_transform")
    y = lt.reference(L.LayoutTransformAttrs("NCHW", dst), x)
    assert lt.type_rel(L.LayoutTransformAttrs("NCHW", dst), [TensorType(x.shape, F32)], [None]).shape == y.shape
    sizes = tuple(c if p == "C" and L.parse_layout(dst).block("C") else 0 for p in "NCHW")
    back = lt.reference(L.LayoutTransformAttrs(dst, "NCHW", sizes if any(sizes) else ()), y)
    np.testing.assert_array_equal(back, x)
    f = L.parse_layout(dst).block("C")
    if f and c % f:  # channel padding is zeros
        assert np.all(L.unpack(y, L.parse_layout(dst))[:, c:] == 0) or dst.startswith("NHWC")


def test_layout_transform_blocked_values() -> None:
    x = np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)
    y = L.convert_array(x, "NCHW", "NCHW2c")
    assert y.shape == (2, 2, 2, 2, 2)
    np.testing.assert_array_equal(y[1, 0, 1, 0], x[1, 0:2, 1, 0])
    np.testing.assert_array_equal(y[1, 1, 1, 0], [x[1, 2, 1, 0], 0])


def test_layout_transform_types_symbolic() -> None:
    n = SizeVar("n")
    x = Var("x", TensorType((n, 13, SizeVar("h"), 4), F32))
    y = get_op("tensor.layout_transform")(x, src_layout="NCHW", dst_layout="NCHW8c")
    assert y.type.shape == (n, 2, SizeVar("h"), 4, 8)
    back = get_op("tensor.layout_transform")(y, src_layout="NCHW8c", dst_layout="NHWC", sizes=(0, 0, 0, 13))
    assert back.type.shape == (n, SizeVar("h"), 4, 13)
    c = Var("c", TensorType((1, SizeVar("c"), 2, 2), F32))
    assert get_op("tensor.layout_transform")(c, src_layout="NCHW", dst_layout="NCHW4c").type.shape[1] == ANY
    w = Var("w", TensorType((5, 3, 3, 3), F32))
    packed = get_op("tensor.layout_transform")(w, src_layout="OIHW", dst_layout="OIHW2i4o")
    assert packed.type.shape == (2, 2, 3, 3, 2, 4)


@pytest.mark.parametrize("src,dst,shape", [
    ("NCHW", "NCHW8", (1, 2, 3, 4)), ("NCHW", "NCH8c", (1, 2, 3, 4)), ("NCHW", "NHWC", (1, 2, 3)),
    ("NCHW", "NCHWC", (1, 2, 3, 4)), ("NCHW", "NCHW8d", (1, 2, 3, 4)), ("NCHW8c", "NCHW", (1, 2, 3, 4, 4)),
])
def test_layout_transform_rejects(src: str, dst: str, shape) -> None:
    x = Var("x", TensorType(shape, F32))
    with pytest.raises(TypeInferenceError):
        get_op("tensor.layout_transform")(x, src_layout=src, dst_layout=dst)


@pytest.mark.parametrize("c,o,ic,oc", [(3, 5, 3, 8), (1, 1, 1, 1), (8, 13, 8, 4), (7, 2, 2, 2)])
def test_blocked_and_nhwc_conv_match_nn_conv(c: int, o: int, ic: int, oc: int) -> None:
    rng = np.random.default_rng(o)
    x, w, b = _rand(rng, 2, c, 7, 6), _rand(rng, o, c, 3, 3), _rand(rng, o)
    geo = {"pads": (1, 0, 1, 2), "strides": (2, 1), "dilations": (1, 2)}
    want = get_op("nn.conv").reference(get_op("nn.conv").attrs_type(**geo), x, w, b)
    a = L.Conv2dNCHWcAttrs(f"NCHW{ic}c", f"OIHW{ic}i{oc}o", **geo)
    args = [L.convert_array(x, "NCHW", a.data_layout), L.convert_array(w, "OIHW", a.kernel_layout),
            L.convert_array(b, "C", f"C{oc}c")]
    got = L.conv2d_nchwc.reference(a, *args)
    assert L.conv2d_nchwc.type_rel(a, [TensorType(v.shape, F32) for v in args], [None] * 3).shape == got.shape
    np.testing.assert_allclose(L.convert_array(got, f"NCHW{oc}c", "NCHW", (0, o, 0, 0) if o % oc else ()),
                               want, rtol=1e-5, atol=1e-5)
    for kernel in ("HWIO", "OHWI"):
        an = L.Conv2dNHWCAttrs(kernel_layout=kernel, **geo)
        got = L.conv2d_nhwc.reference(an, x.transpose(0, 2, 3, 1), L.convert_array(w, "OIHW", kernel), b)
        np.testing.assert_allclose(got.transpose(0, 3, 1, 2), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,kw", [("max", {"kernel_shape": (2, 3), "strides": (2, 1), "pads": (1, 0, 0, 1)}),
                                     ("average", {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1)}),
                                     ("lp", {"kernel_shape": (2, 2), "p": 3}), ("global_average", {}),
                                     ("global_max", {})])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW4c"])
def test_pool2d_layout_matches_nn_pool(mode: str, kw: dict, layout: str) -> None:
    x = _rand(np.random.default_rng(1), 2, 5, 6, 7)
    a = L.Pool2dLayoutAttrs(mode=mode, layout=layout, **kw)
    op, nchw = L.nchw_pool_attrs(a)
    want = op.reference(nchw, x)
    want = want[0] if isinstance(want, tuple) else want
    xv = Var("x", TensorType((SizeVar("n"), 5, 6, 7), F32))
    call = L.pool2d_layout(get_op("tensor.layout_transform")(xv, src_layout="NCHW", dst_layout=layout), attrs=a)
    got = kiln.evaluate(IRModule({"main": Function((xv,), call)}), {"x": x})[0]
    back = L.convert_array(got, layout, "NCHW", (0, 5, 0, 0) if layout == "NCHW4c" else ())
    np.testing.assert_allclose(back, want, rtol=1e-5, atol=1e-6)


def test_layout_ops_print_and_parse() -> None:
    src = """
def @main(%x: Tensor[(n, 3, 5, 5), float32]) -> Tensor[(n, 2, 5, 5), float32] {
  %0 = tensor.layout_transform(%x, src_layout="NCHW", dst_layout="NCHW2c");
  %1 = nn.conv2d_nchwc(%0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]:float32(1, 2, 1, 1, 2, 2), data_layout="NCHW2c", kernel_layout="OIHW2i2o");
  %2 = nn.pool2d_layout(%1, mode="max", layout="NCHW2c", kernel_shape=(3, 3), pads=(1, 1, 1, 1));
  tensor.layout_transform(%2, src_layout="NCHW2c", dst_layout="NCHW", sizes=(0, 2, 0, 0))
}
"""
    mod = parse(src)
    assert kiln.ir.structural_equal(parse(text(mod)), mod)


# ---------------------------------------------------------------------------------------------
# golden tests

CHAIN = """
def @main(%x: Tensor[(n, 2, 5, 5), float32]) -> Tensor[(n, 2, 5, 5), float32] {
  %0 = nn.conv(%x, [1.0, 2.0, 3.0, 4.0]:float32(2, 2, 1, 1));
  %1 = nn.relu(%0);
  %2 = math.add(%1, [0.5, -0.5]:float32(2, 1, 1));
  nn.conv(%2, [1.0, 0.0, 0.0, 1.0]:float32(2, 2, 1, 1), [1.0, 2.0]:float32(2,))
}
"""


def test_convert_layout_golden_edges_only_and_weights_folded() -> None:
    """One transform at each edge of the region; OIHW weights become HWIO constants."""
    assert_golden(convert_layout, CHAIN, """
def @main(%x: Tensor[(n, 2, 5, 5), float32]) -> Tensor[(n, 2, 5, 5), float32] {
  %0 = tensor.layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %1 = nn.conv2d_nhwc(%0, [1.0, 3.0, 2.0, 4.0]:float32(1, 1, 2, 2));
  %2 = nn.relu(%1);
  %3 = math.add(%2, [0.5, -0.5]:float32(1, 1, 1, 2));
  %4 = nn.conv2d_nhwc(%3, [1.0, 0.0, 0.0, 1.0]:float32(1, 1, 2, 2), [1.0, 2.0]:float32(2,));
  tensor.layout_transform(%4, src_layout="NHWC", dst_layout="NCHW")
}
""")


def test_alter_op_layout_golden_blocked_chain() -> None:
    """Blocked convs exchange NCHW2c directly; weights and bias are packed at compile time."""
    assert_golden(alter_op_layout, CHAIN, """
def @main(%x: Tensor[(n, 2, 5, 5), float32]) -> Tensor[(n, 2, 5, 5), float32] {
  %0 = tensor.layout_transform(%x, src_layout="NCHW", dst_layout="NCHW2c");
  %1 = nn.conv2d_nchwc(%0, [1.0, 3.0, 2.0, 4.0]:float32(1, 1, 1, 1, 2, 2), data_layout="NCHW2c", kernel_layout="OIHW2i2o");
  %2 = nn.relu(%1);
  %3 = math.add(%2, [0.5, -0.5]:float32(1, 1, 1, 1, 2));
  %4 = nn.conv2d_nchwc(%3, [1.0, 0.0, 0.0, 1.0]:float32(1, 1, 1, 1, 2, 2), [1.0, 2.0]:float32(1, 2), data_layout="NCHW2c", kernel_layout="OIHW2i2o");
  tensor.layout_transform(%4, src_layout="NCHW2c", dst_layout="NCHW")
}
""")


def test_golden_transform_pair_cancels() -> None:
    assert_golden(convert_layout, """
def @main(%x: Tensor[(n, 3, 4, 5), float32]) -> Tensor[(n, 3, 4, 5), float32] {
  %0 = tensor.layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %1 = tensor.layout_transform(%0, src_layout="NHWC", dst_layout="NCHW");
  nn.relu(%1)
}
""", """
def @main(%x: Tensor[(n, 3, 4, 5), float32]) -> Tensor[(n, 3, 4, 5), float32] {
  nn.relu(%x)
}
""")


def test_golden_padded_pair_cancels_only_with_crop() -> None:
    before = """
def @main(%x: Tensor[(1, 3, 2, 2), float32]) -> Tensor[(1, 3, 2, 2), float32] {
  %0 = tensor.layout_transform(%x, src_layout="NCHW", dst_layout="NCHW2c");
  tensor.layout_transform(%0, src_layout="NCHW2c", dst_layout="NCHW", sizes=(0, 3, 0, 0))
}
"""
    assert_golden(convert_layout, before, """
def @main(%x: Tensor[(1, 3, 2, 2), float32]) -> Tensor[(1, 3, 2, 2), float32] {
  %x
}
""")
    uncropped = """
def @main(%x: Tensor[(1, 3, 2, 2), float32]) -> Tensor[(1, 4, 2, 2), float32] {
  %0 = tensor.layout_transform(%x, src_layout="NCHW", dst_layout="NCHW2c");
  tensor.layout_transform(%0, src_layout="NCHW2c", dst_layout="NCHW")
}
"""
    assert_golden(convert_layout, uncropped, uncropped)


def test_golden_transpose_absorbed_into_region_edge() -> None:
    """An NHWC model's transpose to NCHW and the pass's NCHW->NHWC transform cancel."""
    assert_golden(convert_layout, """
def @main(%x: Tensor[(1, 4, 4, 3), float32]) -> Tensor[(1, 2, 4, 4), float32] {
  %0 = tensor.transpose(%x, perm=(0, 3, 1, 2));
  nn.conv(%0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]:float32(2, 3, 1, 1))
}
""", """
def @main(%x: Tensor[(1, 4, 4, 3), float32]) -> Tensor[(1, 2, 4, 4), float32] {
  %0 = nn.conv2d_nhwc(%x, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]:float32(1, 1, 3, 2));
  tensor.layout_transform(%0, src_layout="NHWC", dst_layout="NCHW")
}
""")


def test_golden_constant_transform_folds() -> None:
    assert_golden(convert_layout, """
def @main(%x: Tensor[(2, 1), float32]) -> Tensor[(2, 1), float32] {
  %0 = tensor.layout_transform([1.0, 2.0]:float32(1, 2), src_layout="CO", dst_layout="OC");
  math.add(%x, %0)
}
""", """
def @main(%x: Tensor[(2, 1), float32]) -> Tensor[(2, 1), float32] {
  math.add(%x, [1.0, 2.0]:float32(2, 1))
}
""")


def test_golden_reverse_nhwc_to_nchw() -> None:
    """desired NCHW turns NHWC convs and pools back into nn.conv / nn.max_pool."""
    assert_golden(convert_layout, """
def @main(%x: Tensor[(1, 4, 4, 2), float32]) -> Tensor[(1, 2, 2, 2), float32] {
  %0 = nn.conv2d_nhwc(%x, [1.0, 3.0, 2.0, 4.0]:float32(1, 1, 2, 2));
  nn.pool2d_layout(%0, mode="max", layout="NHWC", kernel_shape=(2, 2), strides=(2, 2))
}
""", """
def @main(%x: Tensor[(1, 4, 4, 2), float32]) -> Tensor[(1, 2, 2, 2), float32] {
  %0 = tensor.layout_transform(%x, src_layout="NHWC", dst_layout="NCHW");
  %1 = nn.conv(%0, [1.0, 2.0, 3.0, 4.0]:float32(2, 2, 1, 1));
  %2 = nn.max_pool(%1, kernel_shape=(2, 2), strides=(2, 2));
  %3 = %2.0;
  tensor.layout_transform(%3, src_layout="NCHW", dst_layout="NHWC")
}
""", config={"convert_layout.desired": {"nn.conv": ("NCHW", "default")}})


def test_padded_alter_crops_at_the_edge() -> None:
    """13 channels in NCHW8c: the padding is cropped where the value leaves the region."""
    rng = np.random.default_rng(3)
    x = Var("x", TensorType((1, 13, 3, 3), F32))
    y = get_op("nn.conv")(x, Constant(_rand(rng, 13, 13, 1, 1)))
    out = run_pass(alter_op_layout, IRModule({"main": Function((x,), get_op("nn.relu")(y))}),
                   config={"alter_op_layout.pad_channels": True})
    last = out.main.body
    assert last.op.name == "tensor.layout_transform" and last.attrs.sizes == (0, 13, 0, 0)
    assert last.args[0].op.name == "nn.relu"


def test_config_errors() -> None:
    mod = parse(CHAIN)
    with pytest.raises(ValueError, match="pad_channels"):
        run_pass(alter_op_layout, mod, config={"alter_op_layout.pad_channels": "yes"})
    for bad in ({"nn.conv": ("NCHW8c", "default")}, {"nn.conv": ("NHWC", "OIHW8o")}, {"nn.conv": ("NCHW", "HWIO")}):
        with pytest.raises(ValueError):
            run_pass(convert_layout, mod, config={"convert_layout.desired": bad})


def test_choose_block() -> None:
    assert [choose_block(c, 8, False) for c in (1, 3, 8, 12, 13, 16, 64)] == [1, 3, 8, 6, 1, 8, 8]
    assert [choose_block(c, 8, True) for c in (1, 3, 8, 12, 13)] == [1, 3, 8, 8, 8]
    # blocks of 16 (AVX-512): 8 where 8 divides (24, 40) or pads less (20, 100); 16 on a tie (255)
    assert [choose_block(c, 16, True) for c in (3, 12, 16, 20, 24, 40, 48, 100, 255)] == [3, 8, 16, 8, 8, 8, 16, 8, 16]
    assert [choose_block(c, 16, False) for c in (12, 24, 17)] == [12, 8, 1]


# ---------------------------------------------------------------------------------------------
# differential tests on random small CNNs


class RandomCNN:
    """conv / relu / add (bias, residual) / pools / concat / slice over NCHW, channels incl. 1 and primes."""

    CHANNELS = (1, 2, 3, 5, 7, 8, 13, 16)

    def __init__(self, seed: int, batch=2):
        self.rng = np.random.default_rng(seed)
        self.batch = batch

    def c(self, *shape) -> Constant:
        return Constant(_rand(self.rng, *shape))

    def conv(self, x, o=None):
        c = x.type.shape[1]
        o = o or int(self.rng.choice(self.CHANNELS))
        k = int(self.rng.choice([1, 3]))
        kw = {"pads": (k // 2,) * 4, "strides": (int(self.rng.integers(1, 3)),) * 2 if k == 3 else None}
        bias = (self.c(o),) if self.rng.random() < 0.5 else ()
        return get_op("nn.conv")(x, self.c(o, c, k, k), *bias, **kw)

    def step(self, x):
        r = self.rng.random()
        h = x.type.shape[2]
        if r < 0.35:
            return self.conv(x)
        if r < 0.5:
            return get_op(str(self.rng.choice(["nn.relu", "nn.sigmoid", "math.tanh"])))(x)
        if r < 0.6:
            return get_op("math.add")(x, self.c(x.type.shape[1], 1, 1))
        if r < 0.7:
            return get_op("math.add")(x, self.conv(x, x.type.shape[1]) if h < 2 else self._same(x))
        if r < 0.8 and h >= 2:
            if self.rng.random() < 0.5:
                return TupleGetItem(get_op("nn.max_pool")(x, kernel_shape=(2, 2), strides=(2, 2)), 0)
            return get_op("nn.average_pool")(x, kernel_shape=(3, 3), pads=(1, 1, 1, 1))
        if r < 0.9:
            return get_op("tensor.concat")(x, self._same(x, o=int(self.rng.choice(self.CHANNELS))), axis=1)
        if r < 0.95:
            return self._slice(x)
        return get_op("math.mul")(x, self.c(1, 1, 1, x.type.shape[3]))

    def _slice(self, x):
        """A channel window (whole blocks or not) and a window with a step over the width."""
        c, w = x.type.shape[1], x.type.shape[3]
        lo = int(self.rng.choice([0, 8])) if c > 8 else 0
        hi = int(self.rng.integers(lo + 1, c + 1)) if self.rng.random() < 0.5 else c
        ints = lambda *v: Constant(np.array(v, np.int64))  # noqa: E731
        if w < 3:
            return get_op("tensor.slice")(x, ints(lo), ints(hi), ints(1))
        return get_op("tensor.slice")(x, ints(lo, 1), ints(hi, w), ints(1, 3), ints(1, 2))

    def _same(self, x, o=None):
        o = o or x.type.shape[1]
        return get_op("nn.conv")(x, self.c(o, x.type.shape[1], 3, 3), pads=(1, 1, 1, 1))

    def module(self, steps: int, batch_dim=None):
        c0 = int(self.rng.choice([1, 3, 5]))
        x = Var("x", TensorType((batch_dim or self.batch, c0, 9, 9), F32))
        y = self.conv(x)
        for _ in range(steps):
            y = self.step(y)
        if self.rng.random() < 0.5:
            y = get_op("nn.global_average_pool")(y)
        feeds = {"x": _rand(self.rng, self.batch, c0, 9, 9)}
        return IRModule({"main": Function((x,), y)}), feeds


def _same_outputs(mod, out, feeds):
    want, got = kiln.evaluate(mod, feeds), kiln.evaluate(out, feeds)
    for w, g in zip(want, got):
        assert w.shape == g.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


CONFIGS = [
    (convert_layout, {}),
    (alter_op_layout, {}),
    (alter_op_layout, {"alter_op_layout.pad_channels": True}),
    (alter_op_layout, {"alter_op_layout.block": 4, "alter_op_layout.pad_channels": True}),
]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("which", range(len(CONFIGS)))
def test_random_cnn_keeps_meaning(seed: int, which: int) -> None:
    p, config = CONFIGS[which]
    mod, feeds = RandomCNN(seed).module(steps=6, batch_dim=SizeVar("n") if seed % 3 == 0 else None)
    out = run_pass(p, mod, config=config)
    _same_outputs(mod, out, feeds)
    names = {e.op.name for e in kiln.ir.post_order(out.main) if hasattr(e, "op") and hasattr(e.op, "name")}
    assert "nn.conv" not in names  # every 2-D conv was converted


@pytest.mark.parametrize("seed", range(4))
def test_round_trip_nhwc_then_nchw(seed: int) -> None:
    mod, feeds = RandomCNN(100 + seed).module(steps=6)
    nhwc = run_pass(convert_layout, mod)
    back = run_pass(convert_layout, nhwc, config={"convert_layout.desired": {"nn.conv": ("NCHW", "OIHW")}})
    _same_outputs(mod, back, feeds)
    names = [e.op.name for e in kiln.ir.post_order(back.main) if hasattr(e, "op") and hasattr(e.op, "name")]
    assert "nn.conv2d_nhwc" not in names and names.count("tensor.layout_transform") <= 2


def test_grouped_conv_blocks_inside_its_groups() -> None:
    x = Var("x", TensorType((ANY, 4, ANY, ANY), F32))
    g = get_op("nn.conv")(x, Constant(np.ones((4, 2, 3, 3), np.float32)), group=2)
    u = Var("u", TensorType(None, F32))
    mod = IRModule({"main": Function((x, u), kiln.ir.Tuple((g, get_op("nn.relu")(u))))})
    out = run_pass(alter_op_layout, mod)
    assert "group=2" in text(out) and "NCHW2c" in text(out)  # two channels a group: blocks of 2
    rng = np.random.default_rng(0)
    feeds = {"x": _rand(rng, 1, 4, 5, 6), "u": _rand(rng, 3)}
    _same_outputs(mod, out, feeds)
    out = run_pass(convert_layout, mod)
    rng = np.random.default_rng(0)
    feeds = {"x": _rand(rng, 1, 4, 5, 6), "u": _rand(rng, 3)}
    _same_outputs(mod, out, feeds)


def test_absent_bias_and_nhwc_weight_param() -> None:
    """An omitted bias stays omitted; a weight that is a parameter gets a run-time transform."""
    x = Var("x", TensorType((1, 3, 5, 5), F32))
    w = Var("w", TensorType((4, 3, 3, 3), F32))
    y = get_op("nn.conv")(x, w, kiln.ir.absent(), pads=(1, 1, 1, 1))
    mod = IRModule({"main": Function((x, w), get_op("nn.relu")(y))})
    rng = np.random.default_rng(2)
    feeds = {"x": _rand(rng, 1, 3, 5, 5), "w": _rand(rng, 4, 3, 3, 3)}
    for p, config in CONFIGS:
        out = run_pass(p, mod, config=config)
        _same_outputs(mod, out, feeds)
        assert "nn.conv(" not in text(out)


def test_let_bound_values_are_edges() -> None:
    from kiln.transform.normal_form import to_anf_expr

    mod, feeds = RandomCNN(7).module(steps=4)
    anf = IRModule({"main": Function(mod.main.params, to_anf_expr(mod.main.body))})
    for p, config in CONFIGS[:2]:
        _same_outputs(mod, run_pass(p, anf, config=config), feeds)


def test_deep_chain_no_recursion() -> None:
    x = Var("x", TensorType((1, 3, 4, 4), F32))
    y = get_op("nn.conv")(x, Constant(np.ones((4, 3, 1, 1), np.float32)))
    for _ in range(10_000):
        y = get_op("nn.relu")(y)
    mod = IRModule({"main": Function((x,), y)})
    with PassContext(opt_level=3):
        out = alter_op_layout(mod)
    assert out.main.body.op.name == "tensor.layout_transform"
    assert out.main.body.args[0].type.shape == (1, 1, 4, 4, 4)


def test_passes_off_below_their_opt_level() -> None:
    """convert-layout runs at opt_level 3; alter-op-layout (the blocked x86 conv) already at 2."""
    mod = parse(CHAIN)
    with PassContext(opt_level=2, instruments=[WellFormedCheck()]):
        assert convert_layout(mod) is mod and alter_op_layout(mod) is not mod
    with PassContext(opt_level=1, instruments=[WellFormedCheck()]):
        assert alter_op_layout(mod) is mod
