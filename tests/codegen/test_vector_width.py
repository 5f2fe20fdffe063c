"""Kiln's kernels use the host's full vector width: with AVX-512, gcc's -march=native still prefers
256-bit vectors for loops it vectorizes (it tunes for clock-down on older Intel parts), which halves the
FMA rate of every kernel on a part with two 512-bit FMA ports. FLAGS ask for 512-bit vectors."""

import pytest

from kiln.target import Target
from tests.codegen.assembly import assembly

LOOP = """
void axpy(float* restrict y, const float* restrict x, float a, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
"""


@pytest.mark.skipif(Target.host().vector_bits != 512, reason="the host has no AVX-512")
def test_avx512_host_loops_use_zmm(tmp_path):
    assert "zmm" in assembly(LOOP, tmp_path)


def test_flags_compile_on_any_host(tmp_path):
    assert "axpy" in assembly(LOOP, tmp_path)
