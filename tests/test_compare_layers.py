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


def test_layers_pair_by_size_then_work_then_order():
    cl = _script()
    # Kiln runs the 3x3 (Winograd: fewer FLOPs than direct) before a 1x1 shortcut of the same output size;
    # ONNX Runtime the shortcut first
    kiln = [(100, 4.0e6), (100, 1.0e5), (50, 1.0e4)]
    ort = [(100, 1.2e5), (100, 9.0e6), (7, 1.0)]
    assert cl.pair(kiln, ort) == [1, 0, None]
