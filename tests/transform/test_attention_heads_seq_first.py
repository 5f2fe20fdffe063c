"""attention-heads on PyTorch nn.MultiheadAttention's export (sequence first, a batch of one): the
(S, H, D) / (1, 0, 2) / (1, H, S, D) head split and the (2, 0, 1, 3) merge become the packed 3-D form,
positive constant factors on Q and K (K's between two transposes) fold into the scale; the interpreter
and the compiled model give the same results before and after."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from kiln.op import get_op
from kiln.transform import PassContext
from kiln.transform.attention_heads import attention_heads
from kiln.transform.basic import infer_type

F32 = "float32"


def _c(*v) -> Constant:
    return Constant(np.array(v, np.int64))


def _split(x, s: int, h: int, d: int):
    """x (S, 1, H * D) -> (1, H, S, D) as the exporter writes it."""
    y = get_op("tensor.reshape")(x, _c(s, h, d))
    return get_op("tensor.reshape")(get_op("tensor.transpose")(y, perm=(1, 0, 2)), _c(1, h, s, d))


def _scaled_k(k4, c: float):
    t = get_op("tensor.transpose")(k4, perm=(0, 1, 3, 2))
    m = get_op("math.mul")(t, Constant(np.array([c], np.float32)))
    return get_op("tensor.transpose")(m, perm=(0, 1, 3, 2))


def _mha(s: int, h: int, d: int, cq: float, ck: float, scale: float | None, merge_shape, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = Var("x", TensorType((s, 1, h * d), F32))
    proj = [get_op("linalg.mat_mul")(x, Constant((rng.standard_normal((h * d, h * d)) / 4).astype(F32)))
            for _ in range(3)]
    q = get_op("math.mul")(_split(proj[0], s, h, d), Constant(np.array([cq], np.float32)))
    k = _scaled_k(_split(proj[1], s, h, d), ck)
    att = get_op("nn.attention")(q, k, _split(proj[2], s, h, d), scale=scale)
    y = get_op("tensor.transpose")(_item(att), perm=(2, 0, 1, 3))
    out = get_op("tensor.reshape")(y, _c(*merge_shape))
    mod = infer_type(IRModule({"main": Function((x,), out)}), PassContext())
    return mod, {"x": rng.standard_normal((s, 1, h * d)).astype(F32)}


def _item(att):
    from kiln.ir.expr import TupleGetItem

    return TupleGetItem(att, 0)


def _attentions(mod: IRModule) -> list[Call]:
    return [e for e in post_order(mod.main) if isinstance(e, Call) and getattr(e.op, "name", "") == "nn.attention"]


def _ops(mod: IRModule) -> list[str]:
    return [e.op.name for e in post_order(mod.main) if isinstance(e, Call)]


@pytest.mark.parametrize("s,h,d,cq,ck,scale,merge", [
    (7, 2, 4, 0.5, 0.5, 1.0, "flat"),  # the ViT export: Q and K each scaled by D^-1/4, scale 1
    (5, 3, 2, 0.7, 1.3, None, "seq"),  # default scale, (S, 1, H * D) merge
    (1, 1, 1, 2.0, 0.25, 0.5, "flat"),
    (13, 4, 8, 0.3, 0.3, 1.0, "seq"),
])
def test_seq_first_heads_become_packed_and_scales_fold(s, h, d, cq, ck, scale, merge):
    merge_shape = (s, h * d) if merge == "flat" else (s, 1, h * d)
    before, feeds = _mha(s, h, d, cq, ck, scale, merge_shape)
    after = attention_heads(before, PassContext(opt_level=2))
    (att,) = _attentions(after)
    assert att.attrs.q_num_heads == h and att.attrs.kv_num_heads == h
    assert len(att.args[0].type.shape) == 3
    base = scale if scale is not None else 1 / np.sqrt(d)
    assert att.attrs.scale == pytest.approx(base * cq * ck)
    assert "tensor.transpose" not in _ops(after) and "math.mul" not in _ops(after)
    for g, w in zip(kiln.evaluate(after, feeds), kiln.evaluate(before, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    got = kiln.build(before, opt_level=3).run(feeds)[0]
    np.testing.assert_allclose(got, kiln.evaluate(before, feeds)[0], rtol=1e-4, atol=1e-5)


def test_a_negative_factor_is_not_folded():
    before, feeds = _mha(5, 2, 4, -0.5, 0.5, 1.0, (5, 8))
    after = attention_heads(before, PassContext(opt_level=2))
    (att,) = _attentions(after)
    assert att.attrs.q_num_heads is None  # Q is not a plain split: the 4-D form stays
    for g, w in zip(kiln.evaluate(after, feeds), kiln.evaluate(before, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_batch_of_two_is_not_the_packed_layout():
    x = Var("x", TensorType((5, 2, 8), F32))
    parts = []
    for _ in range(3):
        y = get_op("tensor.reshape")(x, _c(5, 4, 4))  # (S, B * H, D) with B = 2, H = 2
        parts.append(get_op("tensor.reshape")(get_op("tensor.transpose")(y, perm=(1, 0, 2)), _c(2, 2, 5, 4)))
    att = get_op("nn.attention")(*parts)
    mod = infer_type(IRModule({"main": Function((x,), _item(att))}), PassContext())
    after = attention_heads(mod, PassContext(opt_level=2))
    assert _attentions(after)[0].attrs.q_num_heads is None
