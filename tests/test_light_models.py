"""The 9 light_*.onnx models shipped inside the onnx package reproduce their expected outputs."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import kiln
from tests.conformance.cases import assert_similar

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(onnx.__file__)))


def light_cases() -> list[tuple[str, dict]]:
    out = []
    for dj in sorted(glob.glob(os.path.join(DATA, "real", "*", "data.json"))):
        with open(dj) as f:
            meta = json.load(f)
        if meta.get("url", "").startswith("onnx/backend/test/data/light/"):
            out.append((meta["model_name"], meta))
    return out


@pytest.mark.parametrize("name,meta", light_cases(), ids=[n for n, _ in light_cases()])
def test_light_model(name: str, meta: dict) -> None:
    from onnx.backend.test.runner import Runner

    path = os.path.join(ROOT, meta["url"])
    model = onnx.load(path)
    mod = kiln.from_onnx(model)
    inits = {t.name for t in model.graph.initializer}
    feeds = {vi.name: Runner.generate_dummy_data(vi, seed=0, name=name, random=False)
             for vi in model.graph.input if vi.name not in inits}
    refs = []
    for i in range(len(model.graph.output)):
        t = onnx.TensorProto()
        with open(f"{os.path.splitext(path)[0]}_output_{i}.pb", "rb") as f:
            t.ParseFromString(f.read())
        refs.append(numpy_helper.to_array(t))
    with np.errstate(all="ignore"):
        outs = kiln.evaluate(mod, feeds)
    assert_similar(refs, outs, meta.get("rtol", 1e-3), meta.get("atol", 1e-7))


def test_all_nine_light_models_found() -> None:
    assert len(light_cases()) == 9
