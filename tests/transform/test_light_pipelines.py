"""The light_*.onnx models keep their outputs through the full pipelines (opt_level 1 and 3)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.transform import PassContext, WellFormedCheck
from tests.test_light_models import ROOT, light_cases


# NOTE: an open bug, not a tolerance: found 2026-11-23 with numpy 2.4.6 and onnx 1.23.2 (it passed on the previous
# CI run). Level 1 plus combine-parallel-conv2d alone is right; level 3 without that pass is right; level 3 with it
# gives 8 of 1000 softmax outputs 0.0 instead of 0.001 (indices 0-3 and 500-503)
KNOWN_WRONG = {("inception_v1", 3): "combine-parallel-conv2d together with the other level-3 passes changes 8 outputs"}


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
            if (name, level) not in KNOWN_WRONG:
                raise
            pytest.xfail(KNOWN_WRONG[name, level])
