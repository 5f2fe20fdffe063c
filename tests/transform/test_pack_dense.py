"""pack-dense: which matrix products get a panel-packed constant weight, the packed layout itself,
and the rewritten graph computing what the original did (interpreter before vs after)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import TypeInferenceError
from kiln.ir import Constant, Function, IRModule, SizeVar, TensorType, Var
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from kiln.op import get_op
from kiln.op.linalg import unpack_panels
from kiln.target import Target
from kiln.transform import PassContext
from kiln.transform.basic import infer_type
from kiln.transform.pack_dense import pack_dense, panel_width

rng = np.random.default_rng(0)
F32 = "float32"


def _w(*shape, dtype=F32) -> Constant:
    return Constant(rng.standard_normal(shape).astype(dtype))


def _run(params, body, nr: int | None = 8) -> tuple[IRModule, IRModule]:
    mod = infer_type(IRModule({"main": Function(tuple(params), body)}), PassContext())
    config = {} if nr is None else {"pack_dense.nr": nr}
    return mod, pack_dense(mod, PassContext(opt_level=2, config=config))


def _ops(mod: IRModule) -> list[str]:
    return [e.op.name for e in post_order(mod.main) if isinstance(e, Call)]


def _same_results(before: IRModule, after: IRModule, feeds: dict) -> None:
    want, got = kiln.evaluate(before, feeds), kiln.evaluate(after, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, k, n, nr", [(3, 5, 7, 4), (1, 1, 1, 8), (2, 13, 16, 16), (4, 9, 33, 32)])
def test_mat_mul_with_constant_b_is_packed_in_panels(m, k, n, nr):
    a = Var("a", TensorType((m, k), F32))
    w = _w(k, n)
    before, after = _run([a], get_op("linalg.mat_mul")(a, w), nr)
    assert _ops(after) == ["linalg.dense_packed"]
    call = after.main.body
    packed = call.args[1].data
    assert packed.shape == (-(-n // nr), k, nr) and call.attrs.units == n
    np.testing.assert_array_equal(unpack_panels(packed, n), w.data)
    np.testing.assert_array_equal(packed.transpose(1, 0, 2).reshape(k, -1)[:, n:], 0)  # padding is zero
    _same_results(before, after, {"a": rng.standard_normal((m, k)).astype(F32)})


def test_batched_data_and_symbolic_rows_keep_a_2d_weight():
    a = Var("a", TensorType((2, SizeVar("s"), 6), F32))
    before, after = _run([a], get_op("linalg.mat_mul")(a, _w(6, 11)))
    assert _ops(after) == ["linalg.dense_packed"]
    assert after.main.body.type.shape[-1] == 11
    _same_results(before, after, {"a": rng.standard_normal((2, 5, 6)).astype(F32)})


@pytest.mark.parametrize("attrs, cshape", [
    (dict(transB=1), (10,)),
    (dict(), (1, 10)),
    (dict(transB=1, alpha=0.5, beta=2.0), (4, 10)),
    (dict(alpha=3.0), None),
])
def test_gemm_becomes_packed_product_then_elementwise_epilogue(attrs, cshape):
    a = Var("a", TensorType((4, 9), F32))
    b = _w(*((10, 9) if attrs.get("transB") else (9, 10)))
    args = [a, b] + ([_w(*cshape)] if cshape else [])
    before, after = _run([a], get_op("linalg.gemm")(*args, **attrs))
    ops = _ops(after)
    assert "linalg.gemm" not in ops and ops[0] == "linalg.dense_packed"
    assert ("math.add" in ops) == (cshape is not None)
    _same_results(before, after, {"a": rng.standard_normal((4, 9)).astype(F32)})


def test_products_left_alone():
    a, b = Var("a", TensorType((4, 9), F32)), Var("b", TensorType((9, 5), F32))
    ai = Var("ai", TensorType((4, 9), "int32"))
    v = Var("v", TensorType((9,), F32))
    cases = [
        ([a, b], get_op("linalg.mat_mul")(a, b)),  # B is not a constant
        ([a], get_op("linalg.gemm")(a, _w(4, 5), transA=1)),  # transposed A
        ([a], get_op("linalg.mat_mul")(a, _w(3, 9, 5))),  # batched constant B
        ([v], get_op("linalg.mat_mul")(v, _w(9, 5))),  # 1-D A
        ([ai], get_op("linalg.mat_mul")(ai, Constant(np.ones((9, 5), np.int32)))),  # integers
    ]
    for params, body in cases:
        before, after = _run(params, body)
        assert after.main is before.main or "linalg.dense_packed" not in _ops(after)


def test_panel_width_follows_the_target_unless_configured():
    lanes = Target.host().vector_bytes // 4
    assert panel_width(F32, PassContext()) == 2 * lanes
    assert panel_width(F32, PassContext(target=Target.parse("c -vector-bits=512"))) == 32
    assert panel_width(F32, PassContext(target=Target.parse("c -vector-bits=256"))) == 16
    assert panel_width("float64", PassContext()) == lanes
    assert panel_width(F32, PassContext(config={"pack_dense.nr": 24})) == 24


def test_float64_is_packed_too():
    a = Var("a", TensorType((3, 7), "float64"))
    before, after = _run([a], get_op("linalg.mat_mul")(a, _w(7, 5, dtype="float64")), None)
    assert _ops(after) == ["linalg.dense_packed"]
    _same_results(before, after, {"a": rng.standard_normal((3, 7))})


def test_dense_packed_type_relation_rejects_bad_weights():
    a = Var("a", TensorType((3, 7), F32))
    for w, units in [(_w(2, 6, 4), 5), (_w(2, 7, 4), 9), (_w(2, 7, 4), 4), (_w(7, 4), 4)]:
        with pytest.raises(TypeInferenceError):
            _ = get_op("linalg.dense_packed")(a, w, units=units).type
