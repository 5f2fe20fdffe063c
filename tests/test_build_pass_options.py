"""kiln.build's pass options reach the graph passes; a misspelt one fails before anything is built."""

import numpy as np
import pytest

import kiln
from kiln.errors import KilnError
from kiln.ir import Constant, Function, IRModule, TensorType, Var, post_order
from kiln.op import get_op


def _mat_mul() -> IRModule:
    a = Var("a", TensorType((2, 5), "float32"))
    w = Constant(np.arange(60, dtype=np.float32).reshape(5, 12))
    return IRModule({"main": Function((a,), get_op("linalg.mat_mul")(a, w))})


def _weights(compiled) -> list[tuple[int, ...]]:
    return [e.data.shape for f in compiled.mod.functions.values() for e in post_order(f) if isinstance(e, Constant)]


@pytest.mark.parametrize("nr, panels", [(4, 3), (8, 2)])
def test_pack_dense_panel_width_from_build(nr, panels):
    mod = _mat_mul()
    compiled = kiln.build(mod, pass_config={"pack_dense.nr": nr})
    assert _weights(compiled) == [(panels, 5, nr)]
    x = np.ones((2, 5), np.float32)
    np.testing.assert_allclose(compiled.run({"a": x})[0], x @ mod.main.body.args[1].data)


def test_a_disabled_pass_does_not_run():
    compiled = kiln.build(_mat_mul(), disabled_passes=["pack-dense"])
    assert _weights(compiled) == [(5, 12)]


@pytest.mark.parametrize("kw, needle", [
    ({"disabled_passes": ["pack-dense2"]}, "did you mean 'pack-dense'"),
    ({"required_passes": ["fold-constants"]}, "did you mean .fold-constant."),
    ({"pass_config": {"pack_dense.nr_": 4}}, "did you mean 'pack_dense.nr'"),
])
def test_misspelt_options_are_errors(kw, needle):
    with pytest.raises(KilnError, match=needle):
        kiln.build(_mat_mul(), **kw)
