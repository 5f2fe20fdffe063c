"""kiln.ir.aligned: arrays on 64-byte boundaries, and the IR's constants stored there."""

import numpy as np
import pytest

from kiln.ir import Constant
from kiln.ir.aligned import ALIGN, aligned, aligned_copy


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "bool", "float16"])
@pytest.mark.parametrize("shape", [(), (1,), (7, 3), (2, 0, 5), (3, 17, 5)])
def test_aligned_copies_only_what_is_off_the_boundary(dtype, shape):
    """aligned(): equal values, C order, data on 64 bytes; an array already there is returned as is."""
    rng = np.random.default_rng(0)
    base = np.empty(int(np.prod(shape)) * np.dtype(dtype).itemsize + 3 * ALIGN, np.uint8)
    for offset in (0, 4, 16, 32, 48):
        start = (-base.ctypes.data % ALIGN) + offset
        a = base[start:start + int(np.prod(shape)) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
        a[...] = rng.standard_normal(shape).astype(dtype) if dtype != "bool" else rng.random(shape) < 0.5
        got = aligned(a)
        np.testing.assert_array_equal(got, a)
        assert got.dtype == a.dtype and got.shape == a.shape and got.flags.c_contiguous
        assert got.ctypes.data % ALIGN == 0 or got.nbytes == 0
        assert (got is a) == (offset == 0 or a.nbytes == 0)


def test_aligned_makes_a_strided_view_contiguous():
    a = np.arange(60, dtype=np.float32).reshape(6, 10)[:, ::3]
    got = aligned(a)
    assert got.flags.c_contiguous and got.ctypes.data % ALIGN == 0
    np.testing.assert_array_equal(got, a)


@pytest.mark.parametrize("a", [np.arange(1000, dtype=np.float32).reshape(10, 100), np.ones((3, 5, 7), np.int8),
                               np.asfortranarray(np.arange(12.0).reshape(3, 4)), np.array(2.5), np.zeros((0, 4)),
                               np.arange(40, dtype=np.float64)[1::3]])
def test_constants_are_stored_aligned(a):
    """A Constant copies its writable array once, onto 64 bytes: a runtime then passes it to kernels as it
    is (an aligned second copy would double a model's resident weights)."""
    c = Constant(a)
    np.testing.assert_array_equal(c.data, a)
    assert c.data.ctypes.data % ALIGN == 0 or c.data.nbytes == 0
    assert c.data.flags.c_contiguous and not c.data.flags.writeable and not np.shares_memory(c.data, a)
    assert aligned(c.data) is c.data


def test_read_only_arrays_are_copied_only_off_the_boundary():
    """An ONNX initializer is a read-only view of the model's bytes: copied onto 64 bytes when it is off the
    boundary, taken as is on it; a broadcast splat (zero strides) is never materialized."""
    buf = aligned_copy(np.arange(64, dtype=np.float32))
    for start, copied in ((0, False), (4, True)):
        view = buf[start:start + 32]
        view.flags.writeable = False
        assert np.shares_memory(Constant(view).data, view) != copied
        np.testing.assert_array_equal(Constant(view).data, view)
    splat = np.broadcast_to(np.float32(1.5), (1000, 1000))
    assert np.shares_memory(Constant(splat).data, splat)


def test_object_arrays_are_copied_as_numpy_places_them():
    a = np.array(["a", "bc", None], dtype=object)
    got = aligned_copy(a)
    assert got is not a and list(got) == list(a) and Constant(a).data.dtype == object
