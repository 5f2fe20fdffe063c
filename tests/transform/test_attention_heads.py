"""attention-heads: nn.attention over exporter-split heads reads and writes the packed (B, S, H * D)
tensors, and outputs nobody reads are trimmed; the interpreter gives the same results before and after."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.ir.expr import Call, TupleGetItem
from kiln.ir.visitor import post_order
from kiln.op import get_op
from kiln.transform import PassContext
from kiln.transform.attention_heads import attention_heads
from kiln.transform.basic import infer_type

rng = np.random.default_rng(0)
F32 = "float32"
SWAP = (0, 2, 1, 3)


def _split(x, heads: int, size: int):
    shape = Constant(np.array([0, 0, heads, size], np.int64))
    return get_op("tensor.transpose")(get_op("tensor.reshape")(x, shape), perm=SWAP)


def _merge(y4, hidden: int):
    shape = Constant(np.array([0, 0, hidden], np.int64))
    return get_op("tensor.reshape")(get_op("tensor.transpose")(y4, perm=SWAP), shape)


def _run(params, body) -> tuple[IRModule, IRModule]:
    mod = infer_type(IRModule({"main": Function(tuple(params), body)}), PassContext())
    return mod, attention_heads(mod, PassContext(opt_level=2))


def _attentions(mod: IRModule) -> list[Call]:
    return [e for e in post_order(mod.main) if isinstance(e, Call) and getattr(e.op, "name", "") == "nn.attention"]


def _ops(mod: IRModule) -> list[str]:
    return [e.op.name for e in post_order(mod.main) if isinstance(e, Call)]


def _same(before: IRModule, after: IRModule, feeds: dict) -> None:
    for g, w in zip(kiln.evaluate(after, feeds), kiln.evaluate(before, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _bert_block(b: int, s: int, hq: int, hkv: int, d: int, mask=None):
    x = Var("x", TensorType((b, s, 5 * d), F32))
    proj = lambda n: get_op("linalg.mat_mul")(x, Constant(rng.standard_normal((5 * d, n * d)).astype(F32)))  # noqa: E731
    q, k, v = _split(proj(hq), hq, d), _split(proj(hkv), hkv, d), _split(proj(hkv), hkv, d)
    args = [q, k, v] + ([mask] if mask is not None else [])
    return x, get_op("nn.attention")(*args, scale=0.3)


@pytest.mark.parametrize("b, s, hq, hkv, d", [(2, 7, 3, 3, 4), (1, 13, 1, 1, 8), (1, 5, 4, 2, 6)])
def test_split_heads_become_packed_and_the_merge_disappears(b, s, hq, hkv, d):
    x, att = _bert_block(b, s, hq, hkv, d)
    before, after = _run([x], _merge(TupleGetItem(att, 0), hq * d))
    (a,) = _attentions(after)
    assert (a.attrs.q_num_heads, a.attrs.kv_num_heads, a.attrs.outputs) == (hq, hkv, 1)
    assert [t.ndim for t in a.type.fields] == [3] and a.args[0].type.ndim == 3
    assert "tensor.transpose" not in _ops(after)
    _same(before, after, {"x": rng.standard_normal((b, s, 5 * d)).astype(F32)})


def test_other_readers_of_the_4d_output_get_it_split_back():
    x, att = _bert_block(1, 6, 2, 2, 4, mask=Constant(rng.standard_normal((6, 6)).astype(F32)))
    y4 = TupleGetItem(att, 0)
    before, after = _run([x], get_op("math.add")(y4, Constant(np.float32(1.0))))
    (a,) = _attentions(after)
    assert a.attrs.q_num_heads == 2 and len(a.args) == 4
    _same(before, after, {"x": rng.standard_normal((1, 6, 20)).astype(F32)})


def test_read_outputs_are_kept():
    """present_value (item 2) is read: Y, present_key and present_value stay, the scores go."""
    x, att = _bert_block(1, 5, 2, 2, 4)
    body = get_op("math.add")(TupleGetItem(att, 2), TupleGetItem(att, 2))
    before, after = _run([x], get_op("tensor.concat")(_merge(TupleGetItem(att, 0), 8), _merge(body, 8), axis=2))
    (a,) = _attentions(after)
    assert a.attrs.outputs == 3
    _same(before, after, {"x": rng.standard_normal((1, 5, 20)).astype(F32)})


def test_4d_heads_of_other_layouts_are_only_trimmed():
    q, k, v = (Var(n, TensorType((1, 2, 5, 4), F32)) for n in "qkv")
    before, after = _run([q, k, v], TupleGetItem(get_op("nn.attention")(q, k, v), 0))
    (a,) = _attentions(after)
    assert a.attrs.outputs == 1 and a.attrs.q_num_heads is None
    _same(before, after, {n: rng.standard_normal((1, 2, 5, 4)).astype(F32) for n in "qkv"})


def test_an_attention_returned_whole_keeps_every_output():
    q, k, v = (Var(n, TensorType((1, 2, 5, 4), F32)) for n in "qkv")
    _, after = _run([q, k, v], get_op("nn.attention")(q, k, v))
    (a,) = _attentions(after)
    assert a.attrs.outputs == 4


def test_the_standard_pipeline_runs_the_bert_encoder_on_packed_heads():
    from kiln.models import bert_tiny
    from kiln.transform.pipeline import optimize

    mod = optimize(kiln.from_onnx(bert_tiny(batch=1)), opt_level=3)
    atts = _attentions(mod)
    for fn in (e for e in post_order(mod.main) if isinstance(e, Function)):
        atts += [c for c in post_order(fn.body) if isinstance(c, Call) and getattr(c.op, "name", "") == "nn.attention"]
    assert atts and all(a.attrs.outputs == 1 and a.args[0].type.ndim == 3 for a in atts)
