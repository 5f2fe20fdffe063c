"""kiln.runtime.model.Model, what kiln.load gives: a loaded AOT model saves itself again from the
kernel-by-kernel view it was loaded with (no lowering, no compiler)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.codegen.cache import CompileCache
from kiln.compiler.compiled_model import CompiledModel
from kiln.errors import ArtifactError
from kiln.models import mlp
from kiln.runtime.model import Model


@pytest.fixture(scope="module")
def built():
    return kiln.build(mlp(batch=2, sizes=(16, 32, 4)))


def test_a_loaded_aot_model_exports_again_without_the_compiler(built, tmp_path, monkeypatch):
    first = kiln.load(built.export(tmp_path / "a"))
    assert type(first.model) is Model and first.model.executor == "aot"

    def refuse(*args, **kwargs):
        raise AssertionError("re-exporting a loaded model must not compile")

    monkeypatch.setattr(CompileCache, "build", refuse)
    again = kiln.load(first.export(tmp_path / "b"))
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_array_equal(again.run(None, {"input": x})[0], built.run({"input": x})[0])


def test_a_model_without_a_kernel_by_kernel_view_refuses_to_export(built, tmp_path):
    bare = Model(built.mod, "aot", built.runner, built.opt_level, target=built.target)
    with pytest.raises(ArtifactError, match="no kernel-by-kernel view"):
        bare.export(tmp_path / "c")


def test_a_built_model_is_a_model_a_session_takes_as_is(built):
    assert isinstance(built, CompiledModel) and isinstance(built, Model)
    assert kiln.InferenceSession(built).model is built
