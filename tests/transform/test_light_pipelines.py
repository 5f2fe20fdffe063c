"""The light_*.onnx models keep their outputs through the full pipelines (opt_level 1 and 3)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.transform import PassContext, WellFormedCheck
from tests.test_light_models import ROOT, light_cases

# NOTE: ill-conditioned, not a miscompile. On normal inputs inception_v1's random weights drive the logits to
# ~8.3e20, where a float32 ulp is ~6.6e13: pack-dense's product (float64, cast to float32) differs from the Gemm's
# by one ulp in 8 of 1000 logits (BLAS summation order: indices 0-3 and 500-503, one chunk per thread), and the
# softmax turns that into 0.0 against 0.001. Which logits flip depends on the BLAS (it passed on a Xeon)
ILL_CONDITIONED = {("inception_v1", 3): "softmax of ~8e20 logits: a one-ulp difference in 8 logits decides 8 outputs"}


@pytest.mark.parametrize("name,meta", light_cases(), ids=[n for n, _ in light_cases()])
def test_light_model_through_pipeline(name: str, meta: dict) -> None:
    import os

    mod = kiln.from_onnx(os.path.join(ROOT, meta["url"]))
    rng = np.random.default_rng(0)
    feeds = {p.name: rng.standard_normal(p.type.shape).astype(np.float32) for p in mod.main.params}
    want = kiln.evaluate(mod, feeds)
    for level in (1, 3):
        with PassContext(opt_level=level, instruments=[WellFormedCheck()]) as ctx:
            opt = kiln.optimize(mod, level, ctx)
        got = kiln.evaluate(opt, feeds)
        try:
            for w, g in zip(want, got):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{name} at opt_level {level}")
        except AssertionError:
            if (name, level) not in ILL_CONDITIONED:
                raise
            pytest.xfail(ILL_CONDITIONED[name, level])
