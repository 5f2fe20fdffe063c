"""Deeper variants of the rotary_embedding, grid_sample, qlinear_matmul and dft computes against
their references through kiln.te.eval, and the calls they leave to the host."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.op import get_op
from kiln.topi import ComputeError
from tests.topi.harness import check, rand, run_compute


def _attrs(name, **kw):
    return get_op(name).attrs_type(**kw)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot", [0, 4])
def test_rotary_packed_heads(interleaved, rot):
    rng = np.random.default_rng(0)
    cos, sin = rand((2, 3, 3), "float32", rng), rand((2, 3, 3), "float32", rng)
    if rot:
        cos, sin = cos[..., :2].copy(), sin[..., :2].copy()
    check("nn.rotary_embedding", _attrs("nn.rotary_embedding", num_heads=2, interleaved=interleaved,
                                        rotary_embedding_dim=rot), [rand((2, 3, 12), "float32", rng), cos, sin])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("pad", ["zeros", "border"])
def test_grid_sample_3d(mode, pad):
    rng = np.random.default_rng(1)
    grid = (rng.random((1, 2, 3, 2, 3)) * 2.4 - 1.2).astype(np.float32)
    check("vision.grid_sample", _attrs("vision.grid_sample", mode=mode, padding_mode=pad),
          [rand((1, 2, 3, 4, 5), "float32", rng), grid])


@pytest.mark.parametrize("kw", [dict(mode="cubic"), dict(padding_mode="reflection")])
def test_grid_sample_cubic_and_reflection(kw):
    rng = np.random.default_rng(2)
    check("vision.grid_sample", _attrs("vision.grid_sample", **kw),
          [rand((1, 1, 3, 3), "float32", rng), rand((1, 2, 2, 2), "float32", rng)])


@pytest.mark.parametrize("n", [5, 7, 8])
def test_irfft_lengths(n):
    rng = np.random.default_rng(3)
    check("signal.dft", _attrs("signal.dft", inverse=1, onesided=1),
          [rand((1, 4, 2), "float64", rng), np.array(n, np.int64), np.array(1, np.int64)], (1, 2))


def test_complex_inverse_dft_runs_on_host():
    rng = np.random.default_rng(4)
    with pytest.raises(ComputeError):
        run_compute("signal.dft", _attrs("signal.dft", inverse=1),
                    [rand((1, 4, 2), "float32", rng), None, np.array(1, np.int64)], (2,))
