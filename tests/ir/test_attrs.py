"""Attribute comparison (kiln.ir.attrs): what structural equality, the printer and the passes use to
compare operator attributes, arrays by value."""

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from kiln.ir.attrs import attr_items, attrs_equal, value_equal


@dataclass(frozen=True)
class A:
    axis: int = 0
    pads: tuple = (0, 0)
    table: np.ndarray | None = None


@dataclass(frozen=True)
class B:
    axis: int = 0


def test_attr_items_in_declaration_order():
    assert attr_items(A(1, (2, 3))) == [("axis", 1), ("pads", (2, 3)), ("table", None)]
    assert attr_items(None) == []


def test_arrays_compare_by_value_dtype_and_shape():
    x = np.array([1.0, np.nan], np.float32)
    assert value_equal(x, x.copy())  # NaN equals NaN
    assert not value_equal(x, x.astype(np.float64))
    assert not value_equal(x, x.reshape(2, 1))
    assert not value_equal(x, [1.0, np.nan])
    bf = np.array([1.5, np.nan], ml_dtypes.bfloat16)
    assert value_equal(bf, bf.copy())


def test_scalars_and_sequences():
    assert value_equal((1, (2, 3)), [1, [2, 3]])
    assert not value_equal(1, 1.0)  # the type is part of the value
    assert value_equal(float("nan"), float("nan"))


def test_attrs_equal_needs_the_same_class():
    t = np.arange(3)
    assert attrs_equal(A(1, table=t), A(1, table=t.copy()))
    assert not attrs_equal(A(1, table=t), A(1, table=t + 1))
    assert not attrs_equal(A(0), B(0))
