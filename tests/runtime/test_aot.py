import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.codegen import CompileCache
from kiln.compiler.aot import build_aot
from kiln.compiler.memory_plan import ALIGN, MemoryLimitError
from kiln.errors import AotError, InputError, KilnError
from kiln.ir.expr import Call, Constant
from kiln.ir.visitor import post_order
from kiln.models import mlp, small_cnn
from kiln.runtime.executor import primitive_functions
from tests.helpers import F, model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> CompileCache:
    return CompileCache(tmp_path_factory.mktemp("kiln-aot-cache"))


def _check(mod, feeds, cache, **kw):
    aot = build_aot(mod, cache=cache, **kw)
    got = aot.run(feeds)
    want = kiln.evaluate(mod, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    return aot, got


@pytest.fixture(scope="module")
def cnn(cache):
    mod = kiln.from_onnx(small_cnn(batch=2))
    return mod, build_aot(mod, cache=cache)


def test_small_cnn_matches_interpreter(cnn):
    mod, aot = cnn
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal((2, 3, 32, 32)).astype(np.float32)
        (got,) = aot.run({"image": x})  # the second run reuses the arena
        np.testing.assert_allclose(got, kiln.evaluate(mod, {"image": x})[0], rtol=1e-4, atol=1e-6)


def test_weights_start_on_64_bytes(cnn):
    """Every weight the entry reads sits on a 64-byte boundary (numpy places large arrays on 16), and is the
    memory of a constant in the module's IR, not a second copy."""
    _, aot = cnn
    assert aot.weights and all(w.ctypes.data % ALIGN == 0 and w.flags.c_contiguous for w in aot.weights)
    consts = [e.data for f in aot.mod.functions.values() for e in post_order(f) if isinstance(e, Constant)]
    assert all(any(np.shares_memory(w, c) for c in consts) for w in aot.weights)


def test_small_cnn_memory_report(cnn):
    _, aot = cnn
    r = aot.memory_report()
    assert r.lower_bound <= r.arena_bytes < r.naive_bytes
    assert r.arena_bytes % ALIGN == 0
    groups = {id(f) for f in primitive_functions(aot.mod)}
    calls = sum(1 for e in post_order(aot.mod.main) if isinstance(e, Call) and id(e.op) in groups)
    assert len(r.order) == calls and len(set(r.order)) <= calls  # equal groups share one kernel
    assert r.output_bytes == 2 * 10 * 4 and r.weight_bytes > 0
    assert "lower bound" in str(r)
    # the fused main's kernels all come from the source; no Python between them
    code = aot.library.source.code
    run = code[code.index("int32_t kiln_model_run("):code.index("int32_t kiln_model_profile(")]
    assert run.count("rc = kiln_body_") == calls and "kiln_now_" not in run


def test_profile_times_every_call_in_plan_order(cnn):
    mod, aot = cnn
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
    prof = aot.profile({"image": x}, runs=3)
    assert [name for name, _ in prof] == list(aot.memory_report().order)
    assert all(t > 0 for _, t in prof)
    (got,) = aot.run({"image": x})  # the profiled entry computes the same run
    np.testing.assert_allclose(got, kiln.evaluate(mod, {"image": x})[0], rtol=1e-4, atol=1e-6)


def test_mlp(cache):
    mod = kiln.from_onnx(mlp(batch=3, sizes=(20, 32, 16, 5)))
    _check(mod, {"input": RNG.standard_normal((3, 20)).astype(np.float32)}, cache)


def test_residual_graph_with_shared_values(cache):
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Mul", ["a", "w"], ["b"]),
             helper.make_node("Exp", ["b"], ["c"]),
             helper.make_node("Add", ["a", "c"], ["d"]),
             helper.make_node("Tanh", ["d"], ["e"]),
             helper.make_node("Add", ["e", "a"], ["y"])]
    w = numpy_helper.from_array(RNG.standard_normal((4, 8)).astype(np.float32), "w")
    mod = kiln.from_onnx(model(nodes, [("x", F, [4, 8])], [("y", F, [4, 8])], [w]))
    _check(mod, {"x": RNG.standard_normal((4, 8)).astype(np.float32)}, cache, opt_level=0)


def test_multi_output_tuple_kernel_and_special_outputs(cache):
    """Outputs: both fields of a Split, one tensor returned twice, a graph input and a constant."""
    nodes = [helper.make_node("Exp", ["x"], ["e"]),
             helper.make_node("Split", ["e"], ["s0", "s1"], axis=1, num_outputs=2),
             helper.make_node("Identity", ["s1"], ["s1b"]),
             helper.make_node("Neg", ["x"], ["n"]),
             helper.make_node("Identity", ["x"], ["xi"]),
             helper.make_node("Identity", ["c"], ["ci"])]
    c = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    outs = [("s0", F, [2, 3]), ("s1", F, [2, 3]), ("s1b", F, [2, 3]), ("n", F, [2, 6]), ("xi", F, [2, 6]),
            ("ci", F, [2, 3])]
    mod = kiln.from_onnx(model(nodes, [("x", F, [2, 6])], outs, [c]))
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    aot, got = _check(mod, {"x": x}, cache)
    np.testing.assert_array_equal(got[4], x)
    assert got[4] is not x and not np.shares_memory(got[1], got[2])
    again = aot.run({"x": x})
    assert not np.shares_memory(again[0], got[0])  # every run returns fresh arrays


def test_output_is_input(cache):
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    m = model(nodes, [("x", F, [3]), ("z", TensorProto.INT64, [2])],
              [("r", F, [3]), ("z", TensorProto.INT64, [2])])
    aot, got = _check(kiln.from_onnx(m), {"x": np.float32([-1, 0, 2]), "z": np.int64([5, -7])}, cache)
    np.testing.assert_array_equal(got[1], [5, -7])


def test_no_model_name_reaches_c(cache):
    nodes = [helper.make_node("Relu", ["in*/x"], ["out */ y"], name="evil */ node")]
    mod = kiln.from_onnx(model(nodes, [("in*/x", F, [3])], [("out */ y", F, [3])]))
    aot, _ = _check(mod, {"in*/x": np.float32([-1, 0, 2])}, cache)
    assert "*/ " not in aot.library.source.code.split("kiln_model_run")[1]


def test_input_errors(cnn):
    _, aot = cnn
    x = np.zeros((2, 3, 32, 32), np.float32)
    with pytest.raises(InputError, match="missing: image"):
        aot.run({})
    with pytest.raises(InputError, match="unknown: img"):
        aot.run({"image": x, "img": x})
    with pytest.raises(InputError, match=r"'image'.*expected dim 0 = 2"):
        aot.run({"image": np.zeros((1, 3, 32, 32), np.float32)})
    with pytest.raises(InputError, match=r"'image' has dtype float64"):
        aot.run({"image": x.astype(np.float64)})
    with pytest.raises(InputError, match=r"'image'.*expected dim 2 = 32"):
        aot.run({"image": np.zeros((2, 3, 64, 16), np.float32)})  # the same size, another shape
    with pytest.raises(InputError, match="'image' must be a tensor"):
        aot.run({"image": x.tolist()})
    # a non-contiguous view is accepted (copied), and so is another array of the right type after it
    big = np.random.default_rng(3).standard_normal((2, 3, 32, 64)).astype(np.float32)
    view = big[..., ::2]
    np.testing.assert_array_equal(aot.run({"image": view})[0], aot.run({"image": view.copy()})[0])
    assert not np.array_equal(aot.run({"image": view})[0], aot.run({"image": x})[0])


def test_memory_limit_fails_before_compiling(tmp_path):
    cache = CompileCache(tmp_path / "cache")
    mod = kiln.from_onnx(small_cnn(batch=2))
    with pytest.raises(MemoryLimitError, match=r"limit of 100000 bytes"):
        build_aot(mod, memory_limit=100_000, cache=cache)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.suffix in (".c", ".so", ".o")]  # gcc never ran


def test_memory_limit_met(cache):
    mod = kiln.from_onnx(mlp(batch=2, sizes=(8, 16, 4)))
    aot = build_aot(mod, cache=cache, memory_limit=1 << 20)
    assert aot.memory_report().arena_bytes <= 1 << 20


def test_refuses_dynamic_shapes(cache):
    with pytest.raises(AotError, match="dynamic shape.*executor=\"graph\""):
        build_aot(kiln.from_onnx(small_cnn(batch="N")), cache=cache)


def test_refuses_control_flow(cache):
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [3])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    mod = kiln.from_onnx(model(nodes, [("c", TensorProto.BOOL, []), ("x", F, [3])], [("y", F, [3])]))
    with pytest.raises(AotError, match="executor=\"graph\""):
        build_aot(mod, cache=cache)


def test_refuses_host_groups(cache):
    nodes = [helper.make_node("NonZero", ["x"], ["y"])]
    mod = kiln.from_onnx(model(nodes, [("x", F, [4])], [("y", TensorProto.INT64, [1, "n"])]))
    with pytest.raises(KilnError, match="executor=\"graph\""):
        build_aot(mod, cache=cache)


def test_concurrent_runs_share_the_arena_safely(cache):
    from concurrent.futures import ThreadPoolExecutor

    mod = kiln.from_onnx(mlp(batch=2, sizes=(8, 32, 32, 4)))
    aot = build_aot(mod, cache=cache)
    xs = [np.random.default_rng(s).standard_normal((2, 8)).astype(np.float32) for s in range(16)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: aot.run({"input": x})[0], xs))
    for x, g in zip(xs, got):
        np.testing.assert_allclose(g, kiln.evaluate(mod, {"input": x})[0], rtol=1e-4, atol=1e-6)


def test_a_custom_compile_cache_holds_the_lowered_groups_too(tmp_path):
    mod = kiln.from_onnx(mlp(batch=1))
    build_aot(mod, cache=CompileCache(tmp_path))
    assert list((tmp_path / "kernels").rglob("*.json")) and list(tmp_path.rglob("*.so"))
