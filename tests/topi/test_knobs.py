"""Schedule knobs: defaults outside tuning, config values inside `applying`, spaces recorded."""

from kiln.topi.knobs import KnobSpace, applying, knob


def test_default_outside_any_config():
    assert knob("t.tile", (4, 8, 16), 8) == 8


def test_config_value_and_space_recorded():
    space = KnobSpace()
    with applying({"t.tile": 16}, space):
        assert knob("t.tile", (4, 8, 16), 8) == 16
        assert knob("t.order", ("ij", "ji"), "ij") == "ij"
    assert space.knobs == {"t.tile": ((4, 8, 16), 8), "t.order": (("ij", "ji"), "ij")}
    assert space.size() == 6
    assert knob("t.tile", (4, 8, 16), 8) == 8  # the block ended


def test_value_outside_choices_falls_back_to_default():
    with applying({"t.tile": 5}):
        assert knob("t.tile", (4, 8), 8) == 8


def test_default_joins_the_choices():
    space = KnobSpace()
    with applying({}, space):
        knob("t.unroll", (1, 2), 4)
    assert space.knobs["t.unroll"][0] == (1, 2, 4)


def test_nested_blocks_restore_the_outer_config():
    with applying({"t.tile": 4}):
        with applying({"t.tile": 16}):
            assert knob("t.tile", (4, 8, 16), 8) == 16
        assert knob("t.tile", (4, 8, 16), 8) == 4
