"""scripts/compare_layers.py: grouping Kiln's kernel calls into layers and pairing them with ONNX Runtime's."""

import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _script():
    spec = importlib.util.spec_from_file_location("compare_layers", SCRIPTS / "compare_layers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_winograd_layer_takes_its_transforms_across_a_shortcut_between():
    ops = {"in": ["winograd_input"], "prod": ["conv2d_nchwc"], "out": ["winograd_output", "add", "relu"],
           "proj": ["conv2d_nchwc"], "pool": ["pool2d_layout"]}
    elements = {"prod": 900, "out": 100, "proj": 100}
    calls = [("pool", 5.0), ("in", 1.0), ("prod", 2.0), ("proj", 0.5), ("out", 3.0)]
    assert _script().kiln_layers(calls, ops, elements) == [(6.0, "prod", 100), (0.5, "proj", 100)]


def test_layers_pair_by_size_then_weight_then_order():
    cl = _script()
    # Kiln runs a Winograd 3x3 (its transformed weight 36/9 of the direct one) before a 1x1 shortcut of the same
    # output size; ONNX Runtime the shortcut first. Two equal blocks follow: each pairs with the nearer
    kiln = [(100, 36 * 64), (100, 128), (100, 36 * 64), (100, 36 * 64), (50, 10)]
    ort = [(100, 128), (100, 9 * 64), (100, 9 * 64), (100, 9 * 64), (7, 1)]
    assert cl.pair(kiln, ort) == [1, 0, 2, 3, None]
