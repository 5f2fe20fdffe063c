"""kiln.build: executor choice, agreement with the interpreter, the build report, the ONNX backend."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.onnx_backend as backend
from kiln.compiler.flop_count import flop_count
from kiln.compiler.model_dims import fix_dims, is_static
from kiln.errors import KilnError
from kiln.ir.expr import Call, Op
from kiln.ir.visitor import post_order
from kiln.models import mlp, small_cnn
from kiln.runtime.executor import primitive_functions


def _image(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def reference():
    mod = kiln.from_onnx(small_cnn())
    return lambda x: kiln.evaluate(mod, {"image": x})[0]


def test_static_model_builds_aot_and_matches_interpreter(reference):
    lines: list[str] = []
    m = kiln.build(small_cnn(batch=2), progress=lines.append)
    assert m.executor == "aot" and m.host_groups == []
    assert [s for s, _, _ in m.report.stages] == ["import", "passes", "lower", "compile", "memory"]
    assert len(lines) == 5 and m.report.kernels > 0 and m.report.compiled + m.report.cached == 1
    x = _image(2)
    np.testing.assert_allclose(m.run({"image": x})[0], reference(x), rtol=1e-4, atol=1e-6)


def test_symbolic_batch_uses_the_graph_executor_for_every_size(reference):
    m = kiln.build(kiln.from_onnx(small_cnn()))
    assert m.executor == "graph"
    assert m.inputs[0].shape == ("N", 3, 32, 32) and m.outputs[0].shape == ("N", 10)
    for batch in (1, 3):
        x = _image(batch, batch)
        np.testing.assert_allclose(m.run({"image": x})[0], reference(x), rtol=1e-4, atol=1e-6)


def test_executor_can_be_forced(reference):
    m = kiln.build(small_cnn(batch=1), executor="graph")
    assert m.executor == "graph"
    x = _image(1)
    np.testing.assert_allclose(m.run({"image": x})[0], reference(x), rtol=1e-4, atol=1e-6)
    with pytest.raises(KilnError, match="static shapes|dynamic shape"):
        kiln.build(small_cnn(), executor="aot")


@pytest.mark.parametrize("kw, needle", [({"target": "cuda"}, "target kind 'cuda'"), ({"executor": "vm"}, "executor 'vm'")])
def test_bad_options_name_what_was_wrong(kw, needle):
    with pytest.raises(KilnError, match=needle):
        kiln.build(small_cnn(), **kw)


def test_fix_dims_and_flop_count():
    fixed = fix_dims(small_cnn(), {"N": 1})
    mod = kiln.from_onnx(fixed)
    assert is_static(mod) and not is_static(kiln.from_onnx(small_cnn()))
    # MACs: stem 16*32*32*27 + two 16*32*32*144 convs + 32*16*16*144 + fc 10*32; 2 FLOPs each
    assert flop_count(mod) == 2 * (16 * 1024 * 27 + 2 * 16 * 1024 * 144 + 32 * 256 * 144 + 320)
    with pytest.raises(KilnError, match="no symbolic dim named B"):
        fix_dims(small_cnn(), {"B": 1})


@pytest.mark.parametrize("make", [lambda: fix_dims(small_cnn(), {"N": 1}), lambda: mlp(batch=3)])
def test_flop_count_survives_layout_and_packing(make):
    """The optimized graph's blocked convs and packed dense count the same work as the model's ops
    (without Winograd, whose batched product does fewer multiplies: counted as they run)."""
    from kiln.compiler.fuse import fuse
    from kiln.transform import PassContext

    mod = kiln.from_onnx(make())
    fused = fuse(mod, 3, PassContext(3, config={"alter_op_layout.winograd": False}))
    assert flop_count(fuse(mod, 3)) <= flop_count(mod)
    ops = {e.op.name for f in fused.functions.values() for e in post_order(f) if isinstance(e, Call)
           and isinstance(e.op, Op)} | {e.op.name for fn in primitive_functions(fused)
                                        for e in post_order(fn.body) if isinstance(e, Call) and isinstance(e.op, Op)}
    assert ops & {"nn.conv2d_nchwc", "linalg.dense_packed"}
    assert flop_count(fused) == flop_count(mod) > 0


def test_onnx_backend_compiles_by_default_and_keeps_the_interpreter():
    model, x = small_cnn(batch=1), _image(1)
    compiled = backend.prepare(model)
    interpreted = backend.prepare(model, "CPU", executor="interpreter")
    assert compiled.compiled is not None and interpreted.compiled is None
    np.testing.assert_allclose(compiled.run([x])[0], interpreted.run({"image": x})[0], rtol=1e-4, atol=1e-6)
    with pytest.raises(KilnError, match="executor 'jit'"):
        backend.prepare(model, executor="jit")
