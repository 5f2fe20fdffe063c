"""The compile cache (hits skip gcc, concurrent builds are safe) and compiler errors."""

import multiprocessing as mp

import numpy as np
import pytest

from kiln.codegen import FLAGS, CompileCache, CompileError, CompilerNotFoundError, build_library
from kiln.codegen import cache as cache_mod
from kiln.errors import KilnError
from kiln.tir import Buffer, BufferStore, FloatImm, For, ForKind, IntImm, PrimFunc, Var

from .conftest import requires_gcc


def add_const(value: float) -> PrimFunc:
    i = Var("i")
    A, B = Buffer("A", (IntImm(16),), "float32"), Buffer("B", (IntImm(16),), "float32")
    return PrimFunc("addc", (A, B), For(i, IntImm(0), IntImm(16), ForKind.SERIAL,
                                       BufferStore(B, A[i] + FloatImm(value), (i,))))


def run(module, value: float) -> None:
    a, b = np.arange(16, dtype=np.float32), np.empty(16, np.float32)
    module.get_function("addc")(a, b)
    np.testing.assert_array_equal(b, a + np.float32(value))


@requires_gcc
def test_hit_skips_gcc_and_key_covers_flags(tmp_path, monkeypatch):
    cache = CompileCache(tmp_path)
    first = build_library([add_const(1.0)], "m", cache=cache)
    calls = []
    real = cache_mod.compile_shared
    monkeypatch.setattr(cache_mod, "compile_shared", lambda *a: calls.append(a) or real(*a))
    second = build_library([add_const(1.0)], "m", cache=cache)
    assert second.path == first.path and calls == []
    run(second, 1.0)
    build_library([add_const(2.0)], "m", cache=cache)
    build_library([add_const(1.0)], "m", cache=cache, flags=FLAGS + ("-DKILN_SOFT_F16",))
    assert len(calls) == 2 and len(list(tmp_path.glob("*/*.so"))) == 3


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "c"))
    assert CompileCache().root == tmp_path / "c"


def _build_in_child(root: str, value: float) -> str:
    module = build_library([add_const(value)], "m", cache=CompileCache(root))
    run(module, value)
    return str(module.path)


@requires_gcc
def test_concurrent_builds_of_one_module(tmp_path):
    with mp.get_context("spawn").Pool(4) as pool:
        paths = pool.starmap(_build_in_child, [(str(tmp_path), 3.0)] * 8)
    assert len(set(paths)) == 1
    kept = (".so", ".c", ".h", ".gch")  # the library, its source, the precompiled runtime header
    leftovers = [p.name for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(kept)]
    assert leftovers == [] and len(list(tmp_path.rglob("*.so"))) == 1 and len(list(tmp_path.rglob("*.gch"))) == 1


@requires_gcc
def test_gcc_failure_keeps_the_source(tmp_path):
    with pytest.raises(CompileError) as err:
        build_library([add_const(4.0)], "m", cache=CompileCache(tmp_path), flags=FLAGS + ("-Dkiln_body_addc=)",))
    msg = str(err.value)
    src = next(tmp_path.rglob("*.c"))
    assert str(src) in msg and "error" in msg and "kept" in msg
    assert "kiln_fn_addc" in src.read_text()
    assert not list(tmp_path.rglob("*.so*"))


def test_missing_gcc_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(CompilerNotFoundError, match="apt-get install gcc"):
        build_library([add_const(1.0)], "m", cache=CompileCache(tmp_path), cc="/nonexistent/gcc")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KilnError, match="'gcc' not found"):
        build_library([add_const(1.0)], "m", cache=CompileCache(tmp_path))
