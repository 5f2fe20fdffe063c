"""Kiln's kernels use the host's full vector width: with AVX-512, gcc's -march=native still prefers
256-bit vectors for loops it vectorizes (it tunes for clock-down on older Intel parts), which halves the
FMA rate of every kernel on a part with two 512-bit FMA ports. FLAGS ask for 512-bit vectors."""

import subprocess

import pytest

from kiln.codegen.compiler import FLAGS, find_compiler
from kiln.transform.pack_dense import host_vector_bytes

LOOP = """
void axpy(float* restrict y, const float* restrict x, float a, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
"""


def assembly(tmp_path) -> str:
    src, out = tmp_path / "axpy.c", tmp_path / "axpy.s"
    src.write_text(LOOP)
    flags = [f for f in FLAGS if f not in ("-shared", "-fPIC")]
    subprocess.run([find_compiler(), *flags, "-S", "-o", str(out), str(src)], check=True)
    return out.read_text()


@pytest.mark.skipif(host_vector_bytes() != 64, reason="the host has no AVX-512")
def test_avx512_host_loops_use_zmm(tmp_path):
    assert "zmm" in assembly(tmp_path)


def test_flags_compile_on_any_host(tmp_path):
    assert "axpy" in assembly(tmp_path)
