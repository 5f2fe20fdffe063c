"""The kernel cache: a rebuild answers fused groups from disk (JSON) instead of lowering them again."""

import json
import shutil

import numpy as np
import pytest

import kiln
from kiln.codegen import CompileCache, generate
from kiln.compiler import kernel_cache as kc
from kiln.compiler.aot import build_aot
from kiln.compiler.lower import build_graph_executor as build_graph
from kiln.ir import Constant, Function, Var
from kiln.ir.expr import Call
from kiln.ir.types import TensorType
from kiln.models import small_cnn
from kiln.op import get_op
from kiln.tir.stmt import Evaluate
from kiln.tune.apply import Tuned
from kiln.tune.tasks import workload_key

requires_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def group(const: np.ndarray) -> Function:
    """relu(x + c): a Primitive function holding a non-scalar constant."""
    x = Var("x", TensorType((2, 4), "float32"))
    body = Call(get_op("nn.relu"), (Call(get_op("math.add"), (x, Constant(const))),))
    return Function((x,), body, {"Primitive": 1})


C = np.arange(4, dtype=np.float32) - 1.5


def test_second_lowering_is_a_hit_with_the_same_code(tmp_path, monkeypatch):
    cache = kc.KernelCache(tmp_path)
    first = cache.lower(group(C), "g")
    assert (cache.hits, cache.misses) == (0, 1)
    monkeypatch.setattr(kc, "lower_primitive", lambda *a: pytest.fail("a hit must not lower"))
    second = kc.KernelCache(tmp_path).lower(group(C), "g")
    assert isinstance(second.func.body, Evaluate)  # no loops: the rendering stands in for them
    assert generate([second.func]).code == generate([first.func]).code
    assert [p.name for p in second.func.params] == [p.name for p in first.func.params]
    assert second.num_params == 1 and second.output_types == first.output_types
    np.testing.assert_array_equal(second.constants[0], C)
    record = json.loads(next(tmp_path.rglob("*.json")).read_text())  # JSON, never pickle
    assert record["format"] == kc.FORMAT and record["constants"] == [[[4], "<f4"]]


def test_key_covers_constants_and_config(tmp_path):
    cache = kc.KernelCache(tmp_path)
    cache.lower(group(C), "g")
    cache.lower(group(C + 1), "g")  # a constant's value may be baked into the code: another entry
    tuned = Tuned({workload_key(group(C), "t"): {"some_knob": 4}}, target="t")
    cache.lower(group(C), "g", tuned)  # another schedule config: another entry
    assert cache.misses == 3 and len(list(tmp_path.rglob("*.json"))) == 3
    assert kc.kernel_key(group(C), None, "t") != kc.kernel_key(group(C), None, "u")


def test_a_damaged_entry_is_a_miss(tmp_path):
    cache = kc.KernelCache(tmp_path)
    cache.lower(group(C), "g")
    entry = next(tmp_path.rglob("*.json"))
    for junk in ("{not json", "[]", '{"format": 1}'):
        entry.write_text(junk)
        cache.lower(group(C), "g")
    record = json.loads(entry.read_text())
    record["params"] = [{"bogus": 1}]
    entry.write_text(json.dumps(record))
    k = cache.lower(group(C), "g")
    assert cache.hits == 0 and cache.misses == 5 and not isinstance(k.func.body, Evaluate)


@requires_gcc
def test_rebuild_from_the_kernel_cache_runs_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln"))
    mod = kiln.from_onnx(small_cnn(batch=1))
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    first = build_aot(mod, cache=CompileCache(tmp_path / "kiln"))  # the default directory, named
    assert list((tmp_path / "kiln" / "kernels").rglob("*.json"))
    monkeypatch.setattr(kc, "lower_primitive", lambda *a: pytest.fail("a rebuild must not lower"))
    again = build_aot(mod, cache=CompileCache(tmp_path / "kiln"))
    assert again.library.path == first.library.path and again.library.source.code == first.library.source.code
    np.testing.assert_array_equal(again.run({"image": x})[0], first.run({"image": x})[0])
    graph = build_graph(mod)  # the kernel-by-kernel executor takes cached kernels too
    np.testing.assert_allclose(graph.run({"image": x})[0], first.run({"image": x})[0], rtol=1e-5, atol=1e-6)


def test_kiln_digest_is_stable():
    assert kc.kiln_digest() == kc.kiln_digest() and len(kc.kiln_digest()) == 64


def _lower_in_child(root: str) -> str:
    k = kc.KernelCache(root).lower(group(C), "g")
    return generate([k.func]).code


def test_concurrent_lowerings_share_one_entry(tmp_path):
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(3) as pool:
        codes = pool.map(_lower_in_child, [str(tmp_path)] * 6)
    assert len(set(codes)) == 1
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 1 and files[0].suffix == ".json"  # no temporary left behind


def test_kernels_the_executor_must_see_are_not_stored():
    from kiln.tir import Buffer, BufferStore, FloatImm, For, ForKind, IntImm, PrimFunc
    from kiln.tir import expr as E

    i, n = E.Var("i"), E.Var("n")
    A, B = Buffer("A", (IntImm(8),), "float32"), Buffer("B", (IntImm(8),), "float32")
    plain = PrimFunc("p", (A, B), For(i, IntImm(0), IntImm(8), ForKind.SERIAL, BufferStore(B, A[i], (i,))))
    unbound = PrimFunc("u", (A, B), For(i, IntImm(0), n, ForKind.SERIAL, BufferStore(B, FloatImm(0.0), (i,))))
    runtime = PrimFunc("r", (A, B), Evaluate(E.Call("int32", "kiln_non_zero", (A, B))))
    assert not kc._loops_need_the_executor(plain)
    assert kc._loops_need_the_executor(unbound) and kc._loops_need_the_executor(runtime)


def test_an_outer_knob_context_bypasses_the_cache(tmp_path):
    from kiln.topi.knobs import applying

    cache = kc.KernelCache(tmp_path)
    cache.lower(group(C), "g")
    with applying({"some_knob": 2}):
        k = cache.lower(group(C), "g")
    assert cache.hits == 0 and not isinstance(k.func.body, Evaluate)
    assert len(list(tmp_path.rglob("*.json"))) == 1
