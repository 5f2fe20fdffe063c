"""A model with symbolic input dims builds one static AOT model per input shapes on first sight
(kiln.runtime.shape_specialized): results match the interpreter at every shape, builds are reused and
evicted least recently used first, and shapes that cannot be built statically run on the graph
executor."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.compiler.model_dims import with_input_shapes
from kiln.errors import InputError
from kiln.ir import Constant, Function, IRModule, SizeVar, TensorType, Var
from kiln.op import get_op
from kiln.runtime.aot_executor import AotExecutor
from kiln.runtime.shape_specialized import ShapeSpecialized
from tests.codegen.conftest import requires_gcc

pytestmark = requires_gcc


def _tiny(n: SizeVar | int | None = None) -> IRModule:
    """x (n, 3, 6, 6), n a symbolic N by default -> conv 3->8 > relu -> mean over H, W -> dense 8->5:
    small, quick to build."""
    rng = np.random.default_rng(0)
    x = Var("image", TensorType((SizeVar("N") if n is None else n, 3, 6, 6), "float32"))
    y = get_op("nn.relu")(get_op("nn.conv")(x, Constant(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))))
    y = get_op("reduce.mean")(y, Constant(np.array([2, 3], np.int64)), keepdims=0)
    y = get_op("linalg.mat_mul")(y, Constant(rng.standard_normal((8, 5)).astype(np.float32)))
    return IRModule({"main": Function((x,), y)})


def _image(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 6, 6)).astype(np.float32)


@pytest.fixture(scope="module")
def cnn():
    mod = _tiny()
    return mod, kiln.build(mod)


def test_each_input_shape_gets_a_static_build(cnn):
    mod, m = cnn
    assert m.executor == "graph" and m.per_shape is not None
    for batch in (1, 3, 1):
        x = _image(batch, batch)
        np.testing.assert_allclose(m.run({"image": x})[0], kiln.evaluate(mod, {"image": x})[0], rtol=1e-4, atol=1e-6)
    built = m.per_shape.built
    assert list(built) == [((3, 3, 6, 6),), ((1, 3, 6, 6),)]  # batch 1 used last
    assert all(isinstance(a, AotExecutor) for a in built.values()) and not m.per_shape.refused


def test_input_errors_name_the_input(cnn):
    _, m = cnn
    with pytest.raises(InputError, match="'image' has dtype float64"):
        m.run({"image": _image(2).astype(np.float64)})
    with pytest.raises(InputError, match=r"'image'.*expected dim 1 = 3"):
        m.run({"image": np.zeros((2, 4, 6, 6), np.float32)})
    with pytest.raises(InputError, match="image"):
        m.run({})


def _aot_build(mod):
    return lambda shapes: kiln.build(with_input_shapes(mod, shapes), executor="aot").runner


def test_least_recently_used_build_goes_first_for_a_shape_seen_twice(cnn):
    mod, m = cnn
    per_shape = ShapeSpecialized(mod, m.runner, _aot_build(mod), limit=2)
    for batch in (1, 2, 1, 4):
        per_shape.run({"image": _image(batch)})
    assert list(per_shape.built) == [((2, 3, 6, 6),), ((1, 3, 6, 6),)]  # full: batch 4 ran on the graph executor
    x = _image(4, seed=9)
    np.testing.assert_allclose(per_shape.run({"image": x})[0], kiln.evaluate(mod, {"image": x})[0], rtol=1e-4,
                               atol=1e-6)
    assert list(per_shape.built) == [((1, 3, 6, 6),), ((4, 3, 6, 6),)] and per_shape.builds == 3


def test_no_builds_past_the_limit_of_builds(cnn):
    mod, m = cnn
    per_shape = ShapeSpecialized(mod, m.runner, _aot_build(mod), limit=1, max_builds=2)
    for batch in (1, 2, 2, 3, 3, 3):
        x = _image(batch, seed=batch)
        np.testing.assert_allclose(per_shape.run({"image": x})[0], kiln.evaluate(mod, {"image": x})[0],
                                   rtol=1e-4, atol=1e-6)
    assert list(per_shape.built) == [((2, 3, 6, 6),)] and per_shape.builds == 2


def test_a_shape_read_from_an_input_value_runs_on_the_graph_executor():
    n = SizeVar("n")
    x, shape = Var("x", TensorType((n, 6), "float32")), Var("shape", TensorType((2,), "int64"))
    y = get_op("tensor.reshape")(get_op("nn.relu")(x), shape)
    mod = IRModule({"main": Function((x, shape), get_op("math.mul")(y, Constant(np.float32(2))))})
    m = kiln.build(mod)
    feeds = {"x": np.arange(-12, 12, dtype=np.float32).reshape(4, 6), "shape": np.array([3, 8], np.int64)}
    np.testing.assert_array_equal(m.run(feeds)[0], kiln.evaluate(mod, feeds)[0])
    assert not m.per_shape.built and list(m.per_shape.refused) == [((4, 6), (2,))]
    np.testing.assert_array_equal(m.run(feeds)[0], kiln.evaluate(mod, feeds)[0])  # not retried: still refused


def test_forced_graph_executor_and_static_models_do_not_specialize():
    m = kiln.build(_tiny(), executor="graph")
    assert m.per_shape is None
    x = _image(2)
    np.testing.assert_allclose(m.run({"image": x})[0], kiln.evaluate(_tiny(), {"image": x})[0], rtol=1e-4, atol=1e-6)
    assert kiln.build(_tiny(2)).per_shape is None


def test_with_input_shapes_retypes_every_call(cnn):
    mod, _ = cnn
    static = with_input_shapes(mod, [(5, 3, 6, 6)])
    assert static.main.params[0].type.shape == (5, 3, 6, 6) and static.main.body.type.shape == (5, 5)
    assert mod.main.params[0].type.shape[0] == SizeVar("N")  # the source is untouched


def test_in_the_background_a_new_shape_runs_on_the_graph_executor_until_its_build_is_kept(cnn):
    """A tiered session's model: no run waits for a shape's build; a later run at that shape uses it."""
    import threading
    import time

    mod, m = cnn
    gate = threading.Event()
    build = _aot_build(mod)
    per_shape = ShapeSpecialized(mod, m.runner, lambda shapes: gate.wait(60) and build(shapes))
    per_shape.background = True
    x = _image(5, seed=5)
    want = kiln.evaluate(mod, {"image": x})[0]
    np.testing.assert_allclose(per_shape.run({"image": x})[0], want, rtol=1e-4, atol=1e-6)  # the build is held
    assert not per_shape.built and per_shape.builds == 1
    gate.set()
    deadline = time.monotonic() + 120
    while not per_shape.built and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(per_shape.built) == [((5, 3, 6, 6),)] and per_shape.builds == 1
    np.testing.assert_allclose(per_shape.run({"image": x})[0], want, rtol=1e-4, atol=1e-6)
