"""User mistakes give kiln errors that name the file, node or input and what was expected."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import kiln
from kiln.errors import InputError, ModelLoadError, TypeInferenceError, UnsupportedOpError
from tests.helpers import F, model


def _add_relu():
    return model([helper.make_node("Add", ["x", "y"], ["z"], name="add0"),
                  helper.make_node("Relu", ["z"], ["r"], name="relu0")],
                 [("x", F, ["N", 3]), ("y", F, [1, 3])], [("r", F, ["N", 3])])


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="no such file"):
        kiln.from_onnx(tmp_path / "nope.onnx")


def test_truncated_file(tmp_path):
    p = tmp_path / "m.onnx"
    data = _add_relu().SerializeToString()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="m.onnx"):
        kiln.from_onnx(p)


def test_garbage_file(tmp_path):
    p = tmp_path / "g.onnx"
    p.write_bytes(b"\xff\xfe not a model at all" * 10)
    with pytest.raises(ModelLoadError, match="g.onnx"):
        kiln.from_onnx(p)


@pytest.mark.parametrize("given", ["proto", "bytes", "str", "path"])
def test_checker_rejects(tmp_path, given):
    """The checker runs however the model arrives (a file is checked from the file, not re-serialized)."""
    m = _add_relu()
    m.graph.node[1].input[0] = "undefined_tensor"
    p = tmp_path / "bad.onnx"
    p.write_bytes(m.SerializeToString())
    arg = {"proto": m, "bytes": m.SerializeToString(), "str": str(p), "path": p}[given]
    with pytest.raises(ModelLoadError, match="checker") as e:
        kiln.from_onnx(arg)
    assert given in ("proto", "bytes") or "bad.onnx" in str(e.value)


def test_unsupported_ops_listed_at_once():
    m = model([helper.make_node("FooOp", ["x"], ["a"], name="first", domain="com.example"),
               helper.make_node("Relu", ["a"], ["b"], name="ok"),
               helper.make_node("BarOp", ["b"], ["c"], name="second", domain="com.example")],
              [("x", F, [2])], [("c", F, [2])])
    m.opset_import.append(helper.make_opsetid("com.example", 3))
    with pytest.raises(UnsupportedOpError) as ei:
        kiln.from_onnx(m)
    msg = str(ei.value)
    for part in ("FooOp", "BarOp", "first", "second", "com.example", "opset 3"):
        assert part in msg
    assert len(ei.value.unsupported) == 2


def test_wrong_input_name_shape_dtype_missing():
    mod = kiln.from_onnx(_add_relu())
    x, y = np.ones((2, 3), np.float32), np.ones((1, 3), np.float32)
    with pytest.raises(InputError, match="unknown input name.*xx"):
        kiln.evaluate(mod, {"xx": x, "y": y})
    with pytest.raises(InputError, match="missing input.*y"):
        kiln.evaluate(mod, {"x": x})
    with pytest.raises(InputError, match="'y'.*shape"):
        kiln.evaluate(mod, {"x": x, "y": np.ones((2, 3), np.float32)})
    with pytest.raises(InputError, match="'x'.*dtype.*float32"):
        kiln.evaluate(mod, {"x": x.astype(np.float64), "y": y})
    with pytest.raises(InputError, match="'x'.*rank"):
        kiln.evaluate(mod, {"x": np.ones(3, np.float32), "y": y})


def test_symbolic_dim_must_agree_across_inputs():
    m = model([helper.make_node("Add", ["x", "y"], ["z"])], [("x", F, ["N", 3]), ("y", F, ["N", 3])],
              [("z", F, ["N", 3])])
    mod = kiln.from_onnx(m)
    with pytest.raises(InputError, match="symbolic dim 'N'"):
        kiln.evaluate(mod, {"x": np.ones((2, 3), np.float32), "y": np.ones((4, 3), np.float32)})


def test_type_error_names_node():
    m = model([helper.make_node("Add", ["x", "y"], ["z"], name="bad_add")],
              [("x", F, [2, 3]), ("y", F, [4, 3])], [("z", F, [2, 3])])
    with pytest.raises(TypeInferenceError, match="bad_add"):
        kiln.from_onnx(m)


def test_symbolic_dims_in_types():
    mod = kiln.from_onnx(_add_relu())
    assert str(mod.main.type) == "fn(Tensor[(N, 3), float32], Tensor[(1, 3), float32]) -> (Tensor[(N, 3), float32],)"
    (r,) = kiln.evaluate(mod, {"x": -np.ones((5, 3), np.float32), "y": np.full((1, 3), 3, np.float32)})
    np.testing.assert_array_equal(r, np.full((5, 3), 2, np.float32))


def test_model_bytes_accepted():
    mod = kiln.from_onnx(_add_relu().SerializeToString())
    assert mod.input_names == ("x", "y")


def test_onnx_backend_runs_by_position_and_name():
    import kiln.onnx_backend as backend

    rep = backend.prepare(_add_relu(), "CPU")
    x, y = np.ones((2, 3), np.float32), np.ones((1, 3), np.float32)
    (a,) = rep.run([x, y])
    (b,) = rep.run({"x": x, "y": y})
    np.testing.assert_array_equal(a, b)
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    assert isinstance(onnx.ModelProto(), onnx.ModelProto)


def test_model_local_function_is_inlined():
    fn = helper.make_function(
        "local", "AddRelu", ["a", "b"], ["c"],
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["c"])],
        [helper.make_opsetid("", 21)])
    m = model([helper.make_node("AddRelu", ["x", "y"], ["z"], domain="local")],
              [("x", F, [3]), ("y", F, [3])], [("z", F, [3])])
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.append(fn)
    mod = kiln.from_onnx(m)
    (z,) = kiln.evaluate(mod, {"x": np.array([1, -5, 2], np.float32), "y": np.ones(3, np.float32)})
    np.testing.assert_array_equal(z, [2, 0, 3])


def test_a_file_is_checked_without_its_weights(tmp_path, monkeypatch):
    """Neither the checker nor the importer parses the main graph's weights into a proto: the checker gets the
    proto without them (kiln.frontend.weights_by_offset), and the file is never loaded whole."""
    path = tmp_path / "m.onnx"
    m = _add_relu()
    m.graph.initializer.append(numpy_helper.from_array(np.ones((1, 3), np.float32), "y"))
    onnx.save(m, path)
    checked = []
    check = onnx.checker.check_model
    monkeypatch.setattr(onnx.checker, "check_model", lambda m, *a, **k: (checked.append(m), check(m, *a, **k)))
    monkeypatch.setattr(onnx, "load", lambda *a, **k: pytest.fail("the file was loaded whole"))
    mod = kiln.from_onnx(path)
    assert len(checked) == 1 and isinstance(checked[0], onnx.ModelProto)
    assert [t.raw_data for t in checked[0].graph.initializer] == [b""]
    (r,) = kiln.evaluate(mod, {"x": np.full((2, 3), -0.5, np.float32)})
    np.testing.assert_array_equal(r, np.full((2, 3), 0.5, np.float32))
