"""Every operator with a te compute against its numpy reference, on random inputs.

Unary and broadcasting ops are generated from the registry (each dtype their type relation
accepts, odd shapes, broadcasting); other ops list their cases in tests/topi/cases.py. An op
with a compute but no case fails test_every_compute_has_a_case.
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln.errors import TypeInferenceError
from kiln.ir.types import TensorType
from kiln.op import REGISTRY, Pattern
from kiln.op.registry import OpDef
from tests.topi.cases import CASES
from tests.topi.harness import check, rand

DTYPES = ("float32", "float64", "float16", "int8", "int32", "int64", "uint8", "uint32", "bool")
UNARY_SHAPES = ((1,), (3, 7), (2, 1, 5), ())
BINARY_SHAPES = (((3, 1, 5), (4, 1)), ((1,), (2, 3)), ((7,), (7,)), ((), (2, 3)))


def _computed() -> list[OpDef]:
    return [op for _, op in sorted(REGISTRY.items()) if op.compute is not None]


def _generated(op: OpDef) -> bool:
    simple = op.num_inputs in ((1, 1), (2, 2), (1, None))
    return op.name not in CASES and simple and op.pattern in (Pattern.ELEMWISE, Pattern.BROADCAST)


def _accepts(op: OpDef, dtype: str, n: int) -> bool:
    from kiln.ir.expr import Var
    try:
        op.infer_type(tuple(Var("x", TensorType((2,), dtype)) for _ in range(n)), _attrs(op))
        return True
    except TypeInferenceError:
        return False


def _attrs(op: OpDef):
    return op.attrs_type() if op.attrs_type is not None else None


def _inputs(op: OpDef, shapes, dtype: str, rng) -> list[np.ndarray]:
    xs = [rand(s, dtype, rng) for s in shapes]
    if op.name in ("math.div", "math.mod") and dtype != "bool" and not dtype.startswith("float"):
        xs[1] = np.where(xs[1] == 0, 3, xs[1]).astype(xs[1].dtype)
    if op.name == "math.pow" and not dtype.startswith("float"):
        xs = [rand(shapes[0], dtype, rng, -3, 3), rand(shapes[1], dtype, rng, -2, 4)]
    if op.name == "math.bit_shift":
        xs[1] = rand(shapes[1], dtype, rng, -2, xs[0].dtype.itemsize * 8 + 2)
    return xs


@pytest.mark.parametrize("name", [op.name for op in _computed() if _generated(op)])
def test_generated(name: str):
    op = REGISTRY[name]
    rng = np.random.default_rng(0)
    arity = op.num_inputs[0] if op.num_inputs[1] is not None else 3
    shapes = UNARY_SHAPES if arity == 1 else BINARY_SHAPES
    tried = 0
    for dtype in DTYPES:
        if not _accepts(op, dtype, arity):
            continue
        for s in shapes:
            s = (s,) if arity == 1 else s if arity == 2 else s + ((1,),)
            check(name, _attrs(op), _inputs(op, s, dtype, rng))
            tried += 1
    assert tried, f"{name}: no dtype accepted"


@pytest.mark.parametrize("name", sorted(CASES))
def test_listed(name: str):
    rng = np.random.default_rng(1)
    for case in CASES[name](rng):
        attrs, arrays, const = case[:3]
        check(name, attrs, arrays, const, *case[3:])


def test_every_compute_has_a_case():
    missing = [op.name for op in _computed() if not _generated(op) and op.name not in CASES]
    assert not missing, f"computes without test cases: {missing}"
