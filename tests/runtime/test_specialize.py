"""Run-time specialization: groups that need small inputs as constants compile when they first run."""

from __future__ import annotations

import numpy as np
from onnx import helper

import kiln
from kiln.compiler.lower import build_graph_executor as build
from tests.helpers import I64, F, model


def test_reduce_with_axes_as_input_compiles_per_value():
    m = model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
              [("x", F, [3, 4, 5]), ("axes", I64, [1])], [("y", F, ["a", "b"])])
    mod = kiln.from_onnx(m)
    cm = build(mod)
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    for axis in (0, 2, 0, -1):
        axes = np.array([axis], np.int64)
        (got,) = cm.run({"x": x, "axes": axes})
        np.testing.assert_allclose(got, x.sum(axis=axis), rtol=1e-5)
    assert not cm.ran_on_host
    (sp,) = cm.specializers.values()
    assert len(sp.cache) == 3  # axis 0 reused its kernel; -1 and 2 are different values


def test_group_that_cannot_compile_runs_on_the_host_and_says_why():
    m = model([helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], sampling_ratio=0, output_height=2,
                                output_width=2)],
              [("x", F, [1, 1, 9, 9]), ("r", F, [1, 4]), ("b", I64, [1])], [("y", F, [1, 1, 2, 2])])
    mod = kiln.from_onnx(m)
    cm = build(mod)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((1, 1, 9, 9)).astype(np.float32),
             "r": np.array([[0.5, 1, 6, 7.5]], np.float32), "b": np.zeros(1, np.int64)}
    np.testing.assert_allclose(cm.run(feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=1e-6)
    (why,) = cm.ran_on_host.values()
    assert "vision.roi_align" in why and "sampling_ratio" in why
