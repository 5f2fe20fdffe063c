"""The tir pipeline skips a simplify that directly follows another: simplify is idempotent."""

import pytest

import kiln
import kiln.codegen.lower_fused as lower_fused
from kiln.codegen.lower_fused import KERNEL_SKIPPED_PASSES
from kiln.compiler.fuse import fuse
from kiln.models import small_cnn
from kiln.runtime.executor import primitive_functions
from kiln.tir.transform import LOWER_PIPELINE, lower_passes, simplify


@pytest.fixture(scope="module")
def kernels():
    """small_cnn's groups as PrimFuncs before the tir passes (what lower_primitive hands them)."""
    got = []
    real = lower_fused.create_prim_func
    lower_fused.create_prim_func = lambda *a, **kw: got.append(real(*a, **kw)) or got[-1]
    try:
        for n, fn in enumerate(primitive_functions(fuse(kiln.from_onnx(small_cnn(batch=1))))):
            lower_fused.lower_primitive(fn, f"g{n}")
    finally:
        lower_fused.create_prim_func = real
    assert got
    return got


def test_simplify_is_idempotent_on_lowered_kernels(kernels):
    for f in kernels:
        once = simplify(f)
        assert str(simplify(once)) == str(once)


@pytest.mark.parametrize("skip", [(), KERNEL_SKIPPED_PASSES])
def test_skipping_the_repeated_simplify_keeps_the_output(kernels, skip):
    for f in kernels:
        naive = f
        for p in LOWER_PIPELINE:
            if p.__name__ not in skip:
                naive = p(naive)
        assert str(lower_passes(f, skip)) == str(naive)
