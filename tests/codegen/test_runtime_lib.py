"""The C runtime library (kiln_top_k, kiln_unique, kiln_non_zero, kiln_non_max_suppression) against
the operators' numpy references, through the whole path: op call -> topi ExternOp -> tir -> C."""

import numpy as np
import pytest

import kiln.topi  # noqa: F401
from kiln.codegen import build_library, runtime_lib
from kiln.codegen.lower_fused import lower_primitive
from kiln.ir import dtype as dt
from kiln.ir.types import SizeVar
from kiln.op import get_op
from kiln.te.eval import EXTERN_FUNCS
from tests.helpers import one_op_module

from .conftest import requires_gcc

pytestmark = requires_gcc
rng = np.random.default_rng(0)

NUMERIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
           "bfloat16", "float32", "float64"]


def _kernel(name, attrs, arrays, const, symbolic, kname):
    mod = one_op_module(name, arrays, attrs, const, dim=lambda k, ax: SizeVar(f"d{ax}") if k == 0 and ax in symbolic
                        else None)
    return lower_primitive(mod.main, kname)


def run_compiled(cache, cases):
    """Compile every case (name, attrs, arrays[, const inputs[, symbolic axes of input 0]]) into one
    module (gcc runs once) and run each: a list of outputs per case."""
    cases = [tuple(c) + ((),) * (5 - len(c)) for c in cases]
    kernels = [_kernel(*c, f"kernel{i}") for i, c in enumerate(cases)]
    mod = build_library([k.func for k in kernels], "rt", cache=cache)
    return [runtime_lib.call(mod.get_function(f"kernel{i}"),
                             [a for j, a in enumerate(arrays) if a is not None and j not in const] + k.constants)
            for i, ((_, _, arrays, const, _), k) in enumerate(zip(cases, kernels))]


def check(cache, *cases):
    """run_compiled, each case compared with the operator's reference."""
    for (name, attrs, arrays, *_), got in zip(cases, run_compiled(cache, cases)):
        ref = get_op(name).reference(attrs, *arrays)
        where = f"{name} {attrs} {[getattr(a, 'dtype', None) for a in arrays]}"
        same(got, list(ref) if isinstance(ref, tuple) else [ref], where)


def same(got, ref, where=""):
    assert len(got) == len(ref), where
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype, (where, g.shape, g.dtype, r.shape, r.dtype)
        np.testing.assert_array_equal(g, r, err_msg=where)


def values(shape, dtype, distinct=6):
    """Few distinct values (so ties happen), NaN and -0.0 among floats."""
    a = rng.integers(0, distinct, size=shape)
    if dtype == "bool":
        return a % 2 == 1
    out = a.astype(dt.to_numpy(dtype))
    if dt.is_float(dtype) and out.size > 2 and dtype != "bfloat16":  # ml_dtypes sorts NaN its own way
        flat = out.reshape(-1)
        flat[0], flat[-1] = np.nan, -0.0
    return out


def test_top_k_every_dtype(cache):
    top_k = get_op("tensor.top_k").attrs_type
    k = np.array([4], np.int64)
    check(cache, *((("tensor.top_k", top_k(axis=1, largest=lg), [values((3, 9, 2), d), k], (1,)))
                   for d in NUMERIC for lg in (0, 1)))


def test_top_k_data_dependent_k_and_symbolic_batch(cache):
    x = values((5, 7), "float32")
    top_k = get_op("tensor.top_k").attrs_type
    check(cache, *(("tensor.top_k", top_k(axis=axis, largest=1), [x, np.array([k], np.int64)], (), (0,))
                   for axis in (0, -1) for k in (0, 3, 5)))


def stable_top_k(x, k, axis, largest):
    """The oracle: a stable argsort on a key whose ascending order is the wanted one (NaN ranks as
    the largest value, as in numpy's sort), the first k."""
    y = np.moveaxis(x, axis, -1)
    key = y.astype(np.float64) if dt.is_float(dt.from_numpy(x.dtype)) else y
    if not largest:
        order = np.argsort(key, axis=-1, kind="stable")
    elif key.dtype == np.float64:
        order = np.lexsort((-key, ~np.isnan(key)), axis=-1)  # NaN first, then descending
    else:
        order = np.argsort(~key, axis=-1, kind="stable")  # ~ reverses integer (and bool) order exactly
    idx = order[..., :k]
    return [np.ascontiguousarray(np.moveaxis(a, -1, axis)) for a in (np.take_along_axis(y, idx, -1), idx)]


def top_k_input(shape, dtype, kind):
    """'wide' values, 'ties' (few distinct), 'special' (ties among NaN, inf, -inf, 0.0 and -0.0 where
    the dtype has them), or each row 'ascending' / 'descending' (worst cases of selection and sort)."""
    np_type = dt.to_numpy(dtype)
    if kind in ("ascending", "descending"):
        ramp = np.arange(shape[-1]) % (2 if dtype == "bool" else 120)
        return np.ascontiguousarray(np.broadcast_to(ramp if kind == "ascending" else ramp[::-1], shape), np_type)
    if kind == "ties" or dtype == "bool":
        return values(shape, dtype, distinct=3)
    if kind == "special" and dt.is_float(dtype):
        return rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0]), shape).astype(np_type)
    if dt.is_float(dtype):
        return rng.standard_normal(shape).astype(np_type)
    info = np.iinfo(np_type)
    return rng.integers(info.min, info.max, size=shape, dtype=np_type, endpoint=True)


# (shape, axis, ks): size 1, primes, the axis first, in the middle (strided rows) and last; k of 1,
# n, and between (small k selects with a heap, large k sorts part of the row); blocks with a tail
TOP_K_LAYOUTS = [((1,), 0, (1,)), ((37, 4), 0, (1, 2, 20, 37)), ((5, 13, 3), 1, (1, 6, 13)),
                 ((3, 101), -1, (1, 5, 50, 101)), ((2, 1000), -1, (7, 500)), ((1, 257), -1, (16, 257)),
                 ((64, 300), 1, (3,))]  # enough work for the rows to be split over threads


@pytest.mark.parametrize("every_k", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_top_k_against_a_stable_argsort(cache, every_k):
    """Every dtype, both directions, sorted or not (the output is sorted either way), every layout;
    exact bits, so NaN, -0.0 and the order of ties all count. Each k of a layout for float32 (and
    for every dtype in the slow run), else one k in turn."""
    top_k = get_op("tensor.top_k").attrs_type
    cases, expected = [], []
    for i, dtype in enumerate(NUMERIC):
        for j, (shape, axis, ks) in enumerate(TOP_K_LAYOUTS):
            kind = ["wide", "ties", "special", "ascending", "descending"][(i + j) % 5]
            x = top_k_input(shape, dtype, kind)
            for k in ks if every_k or dtype == "float32" else ks[(i + j) % len(ks):][:1]:
                for largest in (0, 1):
                    attrs = top_k(axis=axis, largest=largest, sorted=(i + k) % 2)
                    cases.append(("tensor.top_k", attrs, [x, np.array([k], np.int64)], (1,)))
                    expected.append((stable_top_k(x, k, axis, largest), f"{dtype} {kind} {shape} {attrs} k={k}"))
    for got, (ref, where) in zip(run_compiled(cache, cases), expected):
        same([g.view(np.uint8) for g in got], [r.view(np.uint8) for r in ref], where)


def test_unique(cache):
    unique = get_op("tensor.unique").attrs_type
    flat = [("tensor.unique", unique(axis=None, sorted=s), [values((4, 5), d)])
            for d in ("float32", "int32", "uint8", "float16", "bool") for s in (0, 1)]
    x = rng.integers(0, 2, size=(5, 6, 2)).astype(np.int64)
    x[3] = x[1]  # repeated slices along every axis choice
    x[:, 4] = x[:, 0]
    along = [("tensor.unique", unique(axis=a, sorted=s), [x]) for a in (0, 1, -1) for s in (0, 1)]
    check(cache, *flat, *along)


def test_non_zero(cache):
    edges = [np.zeros((4, 3), np.float32), np.ones((6,), np.int32), np.array(2.0, np.float32),
             np.zeros((0, 3), np.float32)]
    check(cache, *(("tensor.non_zero", None, [values((3, 4, 5), d, distinct=3)]) for d in NUMERIC),
          *(("tensor.non_zero", None, [x]) for x in edges))


def _boxes(b, n):
    corner = rng.random((b, n, 2)).astype(np.float32) * 10
    size = rng.random((b, n, 2)).astype(np.float32) * 4
    return np.concatenate([corner, corner + size], axis=-1)


def test_non_max_suppression(cache):
    boxes = _boxes(2, 12)
    boxes[0, 3] = boxes[0, 1]  # identical boxes
    scores = rng.random((2, 3, 12)).astype(np.float32)
    scores[1, 0, 5] = scores[1, 0, 6]  # a tie
    extra = [np.array([4], np.int64), np.array([0.3], np.float32), np.array([0.2], np.float32)]
    cases = []
    for center in (0, 1):
        attrs = get_op("vision.non_max_suppression").attrs_type(center_point_box=center)
        cases += [("vision.non_max_suppression", attrs, [boxes, scores, *extra]),
                  ("vision.non_max_suppression", attrs, [boxes, scores, np.array([20], np.int64)]),
                  ("vision.non_max_suppression", attrs, [boxes, scores, *extra], (2, 3, 4)),
                  ("vision.non_max_suppression", attrs, [boxes, scores])]  # no max_output: nothing kept
    check(cache, *cases)


def test_matches_te_eval_extern_table(cache):
    """The C functions and kiln.te.eval's numpy table agree (same names, same results)."""
    assert set(runtime_lib.RUNTIME_FUNCS) == set(EXTERN_FUNCS)
    x = values((6, 5), "float32")
    k = _kernel("tensor.unique", get_op("tensor.unique").attrs_type(axis=1, sorted=0), [x], (), (), "u")
    got = runtime_lib.call(build_library([k.func], "rt", cache=cache).get_function("u"), [x])
    same(got, list(EXTERN_FUNCS["kiln_unique"]([x], [1, 1, 0])))


def test_module_without_runtime_calls_has_no_runtime_source():
    assert runtime_lib.source([]) == ""
