"""FuseOps: golden groupings and meaning kept; DefuseOps undoes it."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.ir import Call, Function, post_order
from kiln.transform import PASSES
from tests.transform.golden import assert_golden, run_pass

FUSE = PASSES["fuse-ops"]
X = "Tensor[(1, 3, 8, 8), float32]"
W = "Tensor[(4, 3, 3, 3), float32]"
Y = "Tensor[(1, 4, 8, 8), float32]"


def _groups(mod) -> list[list[str]]:
    out = []
    for e in post_order(mod.main):
        if isinstance(e, Function) and e.attr("Primitive"):
            out.append([c.op.name for c in post_order(e.body) if isinstance(c, Call) and not isinstance(c.op, Function)])
    return out


def test_conv_bias_relu_fuse_into_one_group():
    assert_golden(FUSE, f"""
def @main(%x: {X}, %w: {W}, %b: Tensor[(1, 4, 1, 1), float32]) -> {Y} {{
  %0 = nn.conv(%x, %w, pads=(1, 1, 1, 1));
  %1 = math.add(%0, %b);
  nn.relu(%1)
}}""", f"""
def @main(%x: {X}, %w: {W}, %b: Tensor[(1, 4, 1, 1), float32]) -> {Y} {{
  %0 = fn (%p0: {X}, %p1: {W}, %p2: Tensor[(1, 4, 1, 1), float32], Primitive=1) -> {Y} {{
    %1 = nn.conv(%p0, %p1, pads=(1, 1, 1, 1));
    %2 = math.add(%1, %p2);
    nn.relu(%2)
  }};
  %0(%x, %w, %b)
}}""")


def test_elementwise_chain_fuses_into_reduction_but_not_past_it():
    mod = kiln.ir.parse("""
def @main(%x: Tensor[(4, 5), float32]) -> Tensor[(4,), float32] {
  %0 = math.exp(%x);
  %1 = math.mul(%0, [2.0]:float32(1,));
  %2 = reduce.sum(%1, [1]:int64(1,), keepdims=0);
  math.sqrt(%2)
}""")
    out = run_pass(FUSE, mod)
    assert sorted(_groups(out)) == [["math.exp", "math.mul", "reduce.sum"], ["math.sqrt"]]
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(kiln.evaluate(out, {"x": x})[0], kiln.evaluate(mod, {"x": x})[0], rtol=1e-6)


def test_diamond_joins_into_one_group_and_residual_add_joins_conv():
    mod = kiln.ir.parse(f"""
def @main(%x: {X}, %w: Tensor[(3, 3, 3, 3), float32]) -> {X} {{
  %0 = nn.conv(%x, %w, pads=(1, 1, 1, 1));
  %1 = nn.relu(%0);
  %2 = math.exp(%1);
  %3 = math.neg(%1);
  %4 = math.add(%2, %3);
  math.add(%4, %x)
}}""")
    out = run_pass(FUSE, mod)
    assert _groups(out) == [["nn.conv", "nn.relu", "math.exp", "math.neg", "math.add", "math.add"]]


def test_injective_ops_fuse_after_conv_groups_complete():
    mod = kiln.ir.parse(f"""
def @main(%x: {X}, %w: {W}) -> Tensor[(1, 256), float32] {{
  %0 = nn.conv(%x, %w, pads=(1, 1, 1, 1));
  %1 = nn.relu(%0);
  %2 = tensor.transpose(%1, perm=(0, 2, 3, 1));
  tensor.reshape(%2, [1, 256]:int64(2,))
}}""")
    out = run_pass(FUSE, mod)
    assert sorted(_groups(out)) == [["nn.conv", "nn.relu"], ["tensor.transpose", "tensor.reshape"]]


def test_opaque_ops_stay_alone_and_values_used_twice_are_materialized():
    mod = kiln.ir.parse("""
def @main(%x: Tensor[(6,), float32]) -> (Tensor[(6,), float32], Tensor[(6,), float32]) {
  %0 = math.exp(%x);
  %1 = tensor.shape(%0);
  %2 = tensor.reshape(%0, %1);
  (%0, %2)
}""")
    out = run_pass(FUSE, mod)
    for g in _groups(out):
        assert "tensor.shape" not in g or g == ["tensor.shape"]
    x = np.arange(6, dtype=np.float32)
    for a, b in zip(kiln.evaluate(out, {"x": x}), kiln.evaluate(mod, {"x": x})):
        np.testing.assert_allclose(a, b)


def test_max_group_size_is_respected():
    body = "%0 = math.neg(%x);\n" + "".join(f"  %{i} = math.neg(%{i - 1});\n" for i in range(1, 40))
    mod = kiln.ir.parse(f"def @main(%x: Tensor[(3,), float32]) -> Tensor[(3,), float32] {{\n  {body}  %39\n}}")
    out = run_pass(FUSE, mod, config={"fuse_ops.max_group_size": 8})
    sizes = [len(g) for g in _groups(out)]
    assert max(sizes) <= 8 and sum(sizes) == 40


def test_defuse_undoes_fuse():
    src = f"""
def @main(%x: {X}, %w: {W}, %b: Tensor[(1, 4, 1, 1), float32]) -> {Y} {{
  %0 = nn.conv(%x, %w, pads=(1, 1, 1, 1));
  %1 = math.add(%0, %b);
  nn.relu(%1)
}}"""
    fused = run_pass(FUSE, kiln.ir.parse(src))
    back = run_pass(PASSES["defuse-ops"], fused)
    assert kiln.ir.structural_equal(back, kiln.ir.parse(src))


def test_loop_body_is_fused_as_its_own_scope():
    import onnx
    from onnx import helper

    from tests.helpers import F, model

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Exp", ["v_in"], ["e"]), helper.make_node("Neg", ["e"], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", F, [2])],
        [helper.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [2])])
    m = model([helper.make_node("Loop", ["n", "", "v0"], ["v"], body=body)],
              [("n", onnx.TensorProto.INT64, []), ("v0", F, [2])], [("v", F, [2])])
    mod = kiln.from_onnx(m)
    out = run_pass(FUSE, mod)
    assert ["math.exp", "math.neg"] in _groups(out)
    feeds = {"n": np.array(3, np.int64), "v0": np.array([0.1, -0.2], np.float32)}
    np.testing.assert_allclose(kiln.evaluate(out, feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=1e-6)
