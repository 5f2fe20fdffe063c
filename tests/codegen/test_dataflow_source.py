"""The dataflow executor's entries are appended to the AOT module: the AOT part stays byte-identical,
and each call runs by its index."""

import ctypes
import shutil

import numpy as np
import pytest

from kiln.codegen import CBackend, CompileCache
from kiln.codegen.aot_source import COPY_ENTRY, STEP_ENTRY, STEPS_ENTRY, Copy, KernelCall, Ptr
from tests.codegen.test_backend import sigmoid_kernel

CALLS = [KernelCall("sig", (Ptr("input", 0), Ptr("arena", 0))), KernelCall("sig", (Ptr("arena", 0), Ptr("output", 0)))]
COPIES = [Copy(Ptr("output", 1), Ptr("input", 0), 64)]


def test_the_aot_module_is_a_prefix():
    f = sigmoid_kernel()
    aot, flow = CBackend().render_aot([f], CALLS, COPIES).code, CBackend().render_dataflow([f], CALLS, COPIES).code
    assert flow.startswith(aot)
    extra = flow[len(aot):]
    assert all(name in extra for name in (STEP_ENTRY, STEPS_ENTRY, COPY_ENTRY))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_steps_run_by_index_and_a_bad_index_fails(tmp_path):
    backend = CBackend()
    source = backend.render_dataflow([sigmoid_kernel()], CALLS, COPIES)
    lib = backend.load("m", source, backend.compile(source.code, cache=CompileCache(tmp_path))).lib
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    arena, y, z = np.zeros(16, np.float32), np.zeros(16, np.float32), np.zeros(16, np.float32)

    def ptrs(*arrays):
        return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])

    args = (ptrs(x), ptrs(y, z), ctypes.c_void_p(arena.ctypes.data), ptrs(x))
    steps = getattr(lib, STEPS_ENTRY)
    steps.argtypes = [ctypes.c_void_p, ctypes.c_int32] + [ctypes.c_void_p] * 4
    assert steps((ctypes.c_int32 * 2)(0, 1), 2, *args) == 0
    getattr(lib, COPY_ENTRY)(*args)
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-s)), rtol=1e-6)
    np.testing.assert_array_equal(z, x)
    step = getattr(lib, STEP_ENTRY)
    step.argtypes = [ctypes.c_int32] + [ctypes.c_void_p] * 4
    assert step(2, *args) != 0
    assert steps((ctypes.c_int32 * 2)(0, 7), 2, *args) != 0
    lib.kiln_model_failed_call.restype = ctypes.c_int32
    assert lib.kiln_model_failed_call() == 7
