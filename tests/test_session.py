"""kiln.InferenceSession: onnxruntime's API over compiled models, threads, errors."""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest

import kiln
from kiln.errors import InputError, KilnError
from kiln.models import small_cnn
from kiln.session import NodeArg


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    return str(path)


def _image(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)


def test_describes_inputs_and_outputs_like_onnxruntime(cnn_path):
    sess = kiln.InferenceSession(cnn_path)
    assert sess.get_inputs() == [NodeArg("image", ["N", 3, 32, 32], "tensor(float)")]
    assert sess.get_outputs() == [NodeArg("probs", ["N", 10], "tensor(float)")]


def test_run_matches_onnxruntime(cnn_path):
    ort = pytest.importorskip("onnxruntime")
    x = _image(2)
    (want,) = ort.InferenceSession(cnn_path, providers=["CPUExecutionProvider"]).run(None, {"image": x})
    sess = kiln.InferenceSession(small_cnn(batch=2), opt_level=3)
    (got,) = sess.run(None, {"image": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    (named,) = sess.run(["probs"], {"image": x})
    np.testing.assert_array_equal(named, got)


def test_threads_set_openmp_for_the_kernels():
    """With OpenMP threading (Kiln threading's partitions: tests/runtime/test_thread_pool.py)."""
    sess = kiln.InferenceSession(kiln.build(small_cnn(batch=1), target="c -threading=openmp"), threads=1)
    x = _image(1)
    (one,) = sess.run(None, {"image": x})
    lib = sess.model.library.lib
    lib.omp_get_max_threads.restype = ctypes.c_int
    assert lib.omp_get_max_threads() == 1
    two = kiln.InferenceSession(sess.model, threads=2)
    np.testing.assert_allclose(two.run(None, {"image": x})[0], one, rtol=1e-5, atol=1e-7)
    assert lib.omp_get_max_threads() == 2


def test_load_gives_the_same_api(tmp_path):
    model = kiln.build(small_cnn(batch=1))
    d = model.export(tmp_path / "m")
    for sess in (kiln.load(d), kiln.InferenceSession(str(d))):
        assert [i.name for i in sess.get_inputs()] == ["image"]
        x = _image(1)
        np.testing.assert_array_equal(sess.run(None, {"image": x})[0], model.run({"image": x})[0])


def test_a_saved_aot_model_loads_as_aot_and_a_graph_model_as_graph(tmp_path):
    x = _image(1)
    for executor in ("aot", "graph"):
        model = kiln.build(small_cnn(batch=1), executor=executor)
        sess = kiln.load(model.export(tmp_path / executor))
        assert sess.model.executor == executor
        np.testing.assert_array_equal(sess.run(None, {"image": x})[0], model.run({"image": x})[0])
        if executor == "aot":
            assert str(sess.model.runner.memory_report()) == str(model.runner.memory_report())


def test_user_errors_name_what_was_wrong():
    sess = kiln.InferenceSession(small_cnn(batch=1))
    with pytest.raises(InputError, match="unknown output name.*logits.*outputs are probs"):
        sess.run(["logits"], {"image": _image(1)})
    with pytest.raises(InputError, match="image"):
        sess.run(None, {"picture": _image(1)})
    with pytest.raises(InputError, match="image"):
        sess.run(None, {"image": _image(3)})
    with pytest.raises(KilnError, match="threads must be a positive integer"):
        kiln.InferenceSession(sess.model, threads=0)
