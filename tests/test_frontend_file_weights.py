"""An ONNX file's weights read from their place in the file (kiln.frontend.weights_by_offset, issue 35): the
import equals the import of the parsed proto, the proto never holds the weights, and the import's peak
resident memory is about one copy of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln.errors import ModelLoadError
from kiln.frontend.onnx import from_onnx
from kiln.frontend.weights_by_offset import parse_leaving_weights
from kiln.ir.structural import structural_equal
from kiln.models import mlp, small_cnn

ROOT = Path(__file__).resolve().parents[1]


def _mixed() -> onnx.ModelProto:
    """float32, int64 and float16 weights (read from the file) beside a bfloat16 one (kept in the proto)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((2, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([6], np.int64), "shape")
    half = numpy_helper.from_array(rng.standard_normal(6).astype(np.float16), "half")
    brain = helper.make_tensor("brain", TensorProto.BFLOAT16, [6], [0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0])
    nodes = [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Reshape", ["s", "shape"], ["r"]),
             helper.make_node("Cast", ["half"], ["h"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["brain"], ["b"], to=TensorProto.FLOAT),
             helper.make_node("Sum", ["r", "h", "b"], ["y"])]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])], [w, shape, half, brain])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("make", [_mixed, lambda: small_cnn(batch=1)], ids=["mixed", "small_cnn"])
def test_the_file_imports_as_its_parsed_proto_does(make, tmp_path):
    model = make()
    onnx.save(model, tmp_path / "m.onnx")
    assert structural_equal(from_onnx(str(tmp_path / "m.onnx")), from_onnx(model))


def test_the_proto_holds_no_plain_weight(tmp_path):
    onnx.save(_mixed(), tmp_path / "m.onnx")
    model, weights = parse_leaving_weights(str(tmp_path / "m.onnx"))
    assert sorted(weights.spans) == ["half", "shape", "w"]
    kept = {t.name: t for t in model.graph.initializer}
    assert all(kept[n].raw_data == b"" for n in weights.spans)
    assert kept["brain"].int32_data or kept["brain"].raw_data  # not numpy's layout: left in the proto
    for name in weights.spans:
        np.testing.assert_array_equal(weights.read(kept[name]),
                                      numpy_helper.to_array(next(t for t in _mixed().graph.initializer
                                                                 if t.name == name)))


def test_weights_stored_as_external_data_still_load(tmp_path):
    model = small_cnn(batch=1)
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    assert structural_equal(from_onnx(str(tmp_path / "m.onnx")), from_onnx(small_cnn(batch=1)))


def test_a_weight_whose_bytes_disagree_with_its_dims_is_named(tmp_path):
    model = _mixed()
    w = next(t for t in model.graph.initializer if t.name == "w")
    w.raw_data = w.raw_data[:8]
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(ModelLoadError, match="tensor 'w' .* its raw_data holds 8 bytes"):
        from_onnx(str(tmp_path / "m.onnx"))


_PEAK = """
import json, resource, sys
import kiln.frontend.onnx_ops
from kiln.frontend.onnx import from_onnx
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
mod = from_onnx(sys.argv[1])
print(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB is Linux's")
def test_importing_a_file_peaks_near_one_copy_of_its_weights(tmp_path):
    """Before: the checker's parse (file bytes + proto) and then the proto beside the arrays, 2-3 copies."""
    model = mlp(batch=1, sizes=(1024, 4096, 2048))  # 48 MB of float32 weights
    weight_bytes = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    onnx.save(model, tmp_path / "m.onnx")
    del model
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", _PEAK, str(tmp_path / "m.onnx")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    growth = json.loads(done.stdout.splitlines()[-1])
    assert growth < 1.3 * weight_bytes, f"peak grew {growth / weight_bytes:.2f}x the weights"
