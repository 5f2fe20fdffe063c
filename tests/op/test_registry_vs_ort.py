"""Registry-driven differential test: every ONNX op Kiln imports, checked against onnxruntime.

For each op type, its conformance cases are re-run with fresh random values and with every other
dtype the ONNX schema allows for the first input's type variable; elementwise and broadcasting ops
also get odd shapes (size 1, primes, broadcasting). A variant onnxruntime itself rejects is skipped;
a variant ORT runs and Kiln gets wrong fails the test.
"""

from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
import pytest
from onnx import helper

import kiln
from kiln.errors import KilnError
from kiln.ir import dtype as dt
from kiln.ir.expr import Call, Op
from kiln.ir.visitor import post_order
from tests.conformance.cases import data_sets, node_cases
from tests.conformance.test_node_cases import XFAIL

ort = pytest.importorskip("onnxruntime")

# outputs whose values are not defined by inputs alone (random) or are not comparable across dtypes
SKIP_OPS = {"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
            "Multinomial", "Dropout"}
# integer overflow is undefined by ONNX (numpy and onnx.reference wrap, onnxruntime saturates)
OVERFLOW_UNDEFINED = {"ReduceProd", "CumProd", "Pow", "ReduceSumSquare"}
# ops that accumulate in float32 where onnxruntime rounds in float16, or whose long recurrences
# amplify rounding: compared more loosely (Kiln is the closer one to float64 for these)
LOOSE_OPS = {"Attention", "LinearAttention", "AffineGrid", "DFT", "GroupNormalization"}
LOOSE_TOL = {"float16": (3e-2, 5e-3), "float32": (1e-3, 1e-4), "float64": (1e-5, 1e-7)}
# variants where onnxruntime departs from the ONNX spec / conformance data (Kiln follows the spec)
ORT_DISAGREES = {
    "MaxUnpool": (lambda case, dtype: len(node_cases()[case].model.graph.node[0].input) == 3,
                  "ORT reads indices as positions in output_shape, the ONNX test data in the default shape"),
    "Resize": (lambda case, dtype: dtype in dt.INTS,
               "ORT truncates integer results, the spec and onnx.reference round half to even"),
    "Attention": (lambda case, dtype: "qk_matmul" in case and "causal" in case,
                  "ORT leaves the causal mask out of the qk_matmul_output it returns"),
}
TOL = {"float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-7, 1e-9)}


def _cases_by_op() -> dict[str, list[str]]:
    by = collections.defaultdict(list)
    for name, tc in node_cases().items():
        nodes = tc.model.graph.node
        if "_expanded" in name or len(nodes) != 1 or nodes[0].domain not in ("", "ai.onnx") or name in XFAIL:
            continue
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in nodes[0].attribute):
            continue
        if nodes[0].op_type not in SKIP_OPS:
            by[nodes[0].op_type].append(name)
    return dict(sorted(by.items()))


CASES = _cases_by_op()


def _ort_run(model: onnx.ModelProto, feeds: dict) -> list | None:
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception:
        return None  # ORT does not support this variant: nothing to compare with


def _random_like(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if a.dtype.kind == "f" and a.size:
        return rng.standard_normal(a.shape).astype(a.dtype) * 2
    return a


def _ort_disagrees(op_type: str, case: str, dtype: str) -> bool:
    rule = ORT_DISAGREES.get(op_type)
    return rule is not None and rule[0](case, dtype)


def _compare(model: onnx.ModelProto, feeds: dict, what: str) -> bool:
    loose = model.graph.node[0].op_type in LOOSE_OPS
    refs = _ort_run(model, feeds)
    if refs is None:
        return False
    try:
        mod = kiln.from_onnx(model)
        with np.errstate(all="ignore"):
            outs = kiln.evaluate(mod, feeds)
    except KilnError as e:
        pytest.fail(f"{what}: onnxruntime runs it but Kiln fails: {e}")
    for i, (r, o) in enumerate(zip(refs, outs)):
        if not isinstance(r, np.ndarray):
            continue
        o = np.asarray(o)
        if o.dtype != r.dtype and o.dtype.name in dt.NAME_TO_NUMPY and o.dtype.itemsize == r.dtype.itemsize:
            r = r.view(o.dtype)  # onnxruntime returns bfloat16/float8 as raw integers
        assert o.shape == r.shape, f"{what} output {i}: shape {o.shape} vs onnxruntime {r.shape}"
        if r.dtype == object:
            np.testing.assert_array_equal(o, r, err_msg=what)
            continue
        assert o.dtype == r.dtype, f"{what} output {i}: dtype {o.dtype} vs onnxruntime {r.dtype}"
        name = dt.from_numpy(r.dtype)
        rtol, atol = (LOOSE_TOL if loose and name in LOOSE_TOL else TOL).get(name, (0, 0))
        np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"{what} output {i}")
    return True


def _type_var(schema, node) -> tuple[str | None, list[int], list[int], list[str]]:
    """The first input's type variable, the inputs/outputs bound to it, and its allowed dtypes."""
    if not schema.inputs:
        return None, [], [], []
    tv = schema.inputs[0].type_str
    allowed = []
    for c in schema.type_constraints:
        if c.type_param_str == tv:
            for s in c.allowed_type_strs:
                if s.startswith("tensor("):
                    name = s[7:-1]
                    allowed.append({"float": "float32", "double": "float64"}.get(name, name))
    def bound(params, names):
        idx = []
        for i, name in enumerate(names):
            p = params[min(i, len(params) - 1)] if params else None
            if name and p is not None and p.type_str == tv:
                idx.append(i)
        return idx
    return tv, bound(schema.inputs, node.input), bound(schema.outputs, node.output), allowed


def _retyped(model: onnx.ModelProto, ins: list[int], outs: list[int], name: str) -> onnx.ModelProto:
    m = copy.deepcopy(model)
    code = dt.NAME_TO_ONNX[name]
    node = m.graph.node[0]
    for i in ins:
        for vi in m.graph.input:
            if i < len(node.input) and vi.name == node.input[i]:
                vi.type.tensor_type.elem_type = code
    for i in outs:
        for vi in m.graph.output:
            if i < len(node.output) and vi.name == node.output[i]:
                vi.type.tensor_type.elem_type = code
    return m


def _cast(a: np.ndarray, name: str, rng: np.random.Generator) -> np.ndarray:
    npdt = dt.to_numpy(name)
    if name == "bool":
        return a != 0 if a.dtype.kind != "f" else rng.random(a.shape) < 0.5
    if a.dtype.kind == "f" and name in dt.INTS:
        info = np.iinfo(npdt)
        return rng.integers(max(info.min, -20), min(info.max, 20), size=a.shape, endpoint=True).astype(npdt)
    return a.astype(npdt)


def _kiln_pattern(model: onnx.ModelProto) -> int | None:
    try:
        mod = kiln.from_onnx(model)
    except KilnError:
        return None
    ops = [e.op for e in post_order(mod.main) if isinstance(e, Call) and isinstance(e.op, Op)]
    return int(ops[0].pattern) if len(ops) == 1 else None


@pytest.mark.parametrize("op_type", list(CASES))
def test_op_against_onnxruntime(op_type: str) -> None:
    rng = np.random.default_rng(0)
    compared = 0
    for name in CASES[op_type]:
        tc = node_cases()[name]
        model = tc.model
        inputs = [vi.name for vi in model.graph.input]
        for ins, _ in data_sets(tc)[:1]:
            if not all(isinstance(x, np.ndarray) for x in ins):
                continue
            feeds = {n: _random_like(x, rng) for n, x in zip(inputs, ins)}
            first = next((dt.from_numpy(x.dtype) for x in ins if x.dtype.kind != "O"), "string")
            if not _ort_disagrees(op_type, name, first):
                compared += _compare(model, feeds, f"{name} (random values)")
            node = model.graph.node[0]
            try:
                schema = onnx.defs.get_schema(node.op_type, max(o.version for o in model.opset_import))
            except Exception:
                continue
            tv, in_idx, out_idx, allowed = _type_var(schema, node)
            if not in_idx:
                continue
            base = dt.from_numpy(ins[in_idx[0]].dtype) if ins[in_idx[0]].dtype.kind != "O" else "string"
            for other in allowed:
                if other == base or other not in dt.NUMERIC + ("bool",) or base not in dt.NUMERIC + ("bool",):
                    continue
                if (op_type in OVERFLOW_UNDEFINED and other in dt.INTS) or _ort_disagrees(op_type, name, other):
                    continue
                m2 = _retyped(model, in_idx, out_idx, other)
                f2 = dict(feeds)
                for i in in_idx:
                    f2[node.input[i]] = _cast(feeds[node.input[i]], other, rng)
                compared += _compare(m2, f2, f"{name} as {other}")
    if compared == 0:
        pytest.skip(f"onnxruntime runs none of {op_type}'s variants")


ODD_SHAPES = [((1,), (13,)), ((3, 1, 7), (1, 5, 1)), ((), (2, 3)), ((11,), (11,)), ((1, 1), (1, 1)),
              ((2, 3, 5), (5,))]


@pytest.mark.parametrize("op_type", list(CASES))
def test_elementwise_odd_shapes(op_type: str) -> None:
    tc = node_cases()[CASES[op_type][0]]
    model = tc.model
    pattern = _kiln_pattern(model)
    if pattern not in (0, 1):  # ELEMWISE, BROADCAST
        pytest.skip("not an elementwise/broadcast op")
    ins = data_sets(tc)[0][0]
    node = model.graph.node[0]
    if len(ins) not in (1, 2) or len(node.output) != 1 or not all(isinstance(x, np.ndarray) for x in ins):
        pytest.skip("not a 1- or 2-input tensor op")
    rng = np.random.default_rng(1)
    compared = 0
    for shapes in ODD_SHAPES:
        shapes = shapes[: len(ins)]
        if len(ins) == 1:
            shapes = (shapes[0],)
        feeds = {}
        for vi, x, s in zip(model.graph.input, ins, shapes):
            if x.dtype.kind == "f":
                feeds[vi.name] = rng.standard_normal(s).astype(x.dtype)
            elif x.dtype.kind == "b":
                feeds[vi.name] = rng.random(s) < 0.5
            elif x.dtype.kind in "iu":
                feeds[vi.name] = rng.integers(1, 9, size=s).astype(x.dtype)
            else:
                pytest.skip("non-numeric input")
        g = helper.make_graph(
            [node], "odd",
            [helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, list(feeds[vi.name].shape))
             for vi in model.graph.input],
            [helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type, list(np.broadcast_shapes(*shapes)))
             for o in model.graph.output])
        m = helper.make_model(g, opset_imports=model.opset_import)
        m.ir_version = model.ir_version
        compared += _compare(m, feeds, f"{op_type} shapes {shapes}")
    if compared == 0:
        pytest.skip("onnxruntime runs none of the shapes")
