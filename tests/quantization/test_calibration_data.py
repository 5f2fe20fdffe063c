"""Calibration feeds: the file format, random feeds, and clear errors naming the file and the input."""

import os

import numpy as np
import pytest

import kiln
from kiln.errors import CalibrationError
from kiln.quantization.calibration_data import calibration_feeds
from tests.quantization.models import cnn_logits, write_npz_dir


@pytest.fixture(scope="module")
def mod():
    return kiln.from_onnx(cnn_logits())


def image(dtype=np.float32, shape=(1, 3, 32, 32)):
    return np.zeros(shape, dtype)


def test_npz_and_npy_files_are_read_in_name_order(tmp_path, mod):
    np.savez(tmp_path / "b.npz", image=image() + 2)
    np.save(tmp_path / "a.npy", image() + 1)
    (tmp_path / "notes.txt").write_text("ignored")
    feeds = calibration_feeds(str(tmp_path), mod)
    assert [os.path.basename(w) for w, _ in feeds] == ["a.npy", "b.npz"]
    assert [float(f["image"][0, 0, 0, 0]) for _, f in feeds] == [1.0, 2.0]


def test_a_number_gives_random_feeds_with_a_warning(mod):
    with pytest.warns(UserWarning, match="real inputs"):
        feeds = calibration_feeds("3", mod)
    assert len(feeds) == 3 and feeds[0][1]["image"].shape == (1, 3, 32, 32)
    assert not np.array_equal(feeds[0][1]["image"], feeds[1][1]["image"])


def test_a_wrong_input_name_names_the_file_and_the_input(tmp_path, mod):
    np.savez(tmp_path / "f.npz", picture=image())
    with pytest.raises(CalibrationError, match=r"f\.npz: input\(s\) picture are not the model's; its inputs are "
                                               r"image"):
        calibration_feeds(str(tmp_path), mod)


def test_a_wrong_shape_names_the_file_and_the_input(tmp_path, mod):
    np.savez(tmp_path / "f.npz", image=image(shape=(1, 3, 16, 16)))
    with pytest.raises(CalibrationError, match=r"f\.npz: input 'image' has shape \(1, 3, 16, 16\); expected dim 2"):
        calibration_feeds(str(tmp_path), mod)


def test_a_wrong_dtype_names_the_file_and_the_input(tmp_path, mod):
    np.save(tmp_path / "f.npy", image(np.float64))
    with pytest.raises(CalibrationError, match=r"f\.npy: input 'image' has dtype float64; expected float32"):
        calibration_feeds(str(tmp_path), mod)


def test_an_empty_directory_or_a_missing_one_is_an_error(tmp_path, mod):
    with pytest.raises(CalibrationError, match="no .npz or .npy files"):
        calibration_feeds(str(tmp_path), mod)
    with pytest.raises(CalibrationError, match="not a directory"):
        calibration_feeds(str(tmp_path / "nowhere"), mod)
    with pytest.raises(CalibrationError, match="give at least 1"):
        calibration_feeds(0, mod)


def test_a_file_that_is_not_numpy_names_itself(tmp_path, mod):
    (tmp_path / "broken.npy").write_bytes(b"not an array")
    with pytest.raises(CalibrationError, match=r"broken\.npy: cannot read it"):
        calibration_feeds(str(tmp_path), mod)


def test_an_npy_file_for_a_model_of_two_inputs_is_an_error(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "two",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    two = kiln.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    np.save(tmp_path / "x.npy", np.zeros(2, np.float32))
    with pytest.raises(CalibrationError, match=r"x\.npy: an \.npy file holds one array, but the model has inputs a, b"):
        calibration_feeds(str(tmp_path), two)
    os.remove(tmp_path / "x.npy")
    write_npz_dir(str(tmp_path), "a", [np.zeros(2, np.float32)])
    with pytest.raises(CalibrationError, match=r"feed000\.npz: no array for input\(s\) b"):
        calibration_feeds(str(tmp_path), two)
