"""A module compiled as several translation units in parallel: same library, stable cache keys."""

import dataclasses
import multiprocessing as mp
import subprocess

import numpy as np
import pytest

from kiln.codegen import FLAGS, CompileCache, CompileError, build_library, generate
from kiln.codegen import cache as cache_mod
from kiln.codegen.c_source import RENDERED_ATTR, UNIT_MARK, render
from kiln.codegen.cache import plan_chunks, split_units
from kiln.codegen.compiler import object_flags
from kiln.tir import Buffer, BufferStore, FloatImm, For, ForKind, IntImm, PrimFunc, Var

from .conftest import requires_gcc


def add_const(name: str, value: float) -> PrimFunc:
    i = Var("i")
    A, B = Buffer("A", (IntImm(16),), "float32"), Buffer("B", (IntImm(16),), "float32")
    return PrimFunc(name, (A, B), For(i, IntImm(0), IntImm(16), ForKind.SERIAL,
                                      BufferStore(B, A[i] + FloatImm(value), (i,))))


FUNCS = [add_const(f"add{k}", float(k)) for k in range(5)]


def check(module) -> None:
    a = np.arange(16, dtype=np.float32)
    for k in range(5):
        b = np.empty(16, np.float32)
        module.get_function(f"add{k}")(a, b)
        np.testing.assert_array_equal(b, a + np.float32(k))


def test_plan_chunks_is_deterministic_and_balanced():
    sizes = [50, 10, 10, 30, 20, 40, 5]
    chunks = plan_chunks(sizes, 3)
    assert chunks == plan_chunks(sizes, 3)
    assert sorted(i for c in chunks for i in c) == list(range(len(sizes)))
    assert all(c == sorted(c) for c in chunks)
    loads = [sum(sizes[i] for i in c) for c in chunks]
    assert max(loads) - min(loads) <= max(sizes) // 2
    assert plan_chunks(sizes, 1) == [list(range(len(sizes)))]
    assert len(plan_chunks([1, 2], 8)) == 2


def test_generated_module_is_marked_per_function():
    code = generate(FUNCS).code
    prelude, units = split_units(code)
    assert len(units) == len(FUNCS) and code.count(UNIT_MARK) == len(FUNCS)
    for k, unit in enumerate(units):
        assert f"kiln_fn_add{k}(" in unit and f"KILN_BODY int32_t kiln_body_add{k}(" in unit
        assert f"KILN_BODY int32_t kiln_body_add{k}(float* A, float* B);" in prelude  # every unit sees every body
    assert "#define KILN_BODY static" in prelude


def test_a_rendering_carried_by_the_function_gives_the_same_module():
    carried = [dataclasses.replace(f, attrs=((RENDERED_ATTR, render(f)),)) for f in FUNCS]
    assert generate(carried).code == generate(FUNCS).code


@requires_gcc
def test_split_build_matches_single_unit_and_shares_its_key(tmp_path, monkeypatch):
    split = build_library(FUNCS, "m", cache=CompileCache(tmp_path, jobs=3))
    check(split)
    objects = list(tmp_path.rglob("*.o"))
    assert len(objects) == 3
    calls = []
    monkeypatch.setattr(cache_mod, "compile_shared", lambda *a: calls.append(a))
    again = build_library(FUNCS, "m", cache=CompileCache(tmp_path, jobs=1))  # same library key: a hit
    assert again.path == split.path and calls == []
    monkeypatch.undo()
    single = build_library(FUNCS, "m", cache=CompileCache(tmp_path / "one", jobs=1))
    check(single)
    assert single.path.name == split.path.name  # the key does not depend on how it was compiled


@requires_gcc
def test_split_build_reuses_cached_objects(tmp_path, monkeypatch):
    first = build_library(FUNCS, "m", cache=CompileCache(tmp_path, jobs=2))
    first.path.unlink()
    compiled = []
    real = cache_mod.compile_object
    monkeypatch.setattr(cache_mod, "compile_object", lambda *a: compiled.append(a) or real(*a))
    check(build_library(FUNCS, "m", cache=CompileCache(tmp_path, jobs=2)))
    assert compiled == []  # only the link ran


def _build_in_child(root: str) -> str:
    module = build_library(FUNCS, "m", cache=CompileCache(root, jobs=2))
    check(module)
    return str(module.path)


@requires_gcc
def test_concurrent_split_builds(tmp_path):
    with mp.get_context("spawn").Pool(3) as pool:
        paths = pool.map(_build_in_child, [str(tmp_path)] * 6)
    assert len(set(paths)) == 1
    kept = (".so", ".c", ".o", ".h", ".gch")  # libraries, sources, objects, the precompiled runtime header
    leftovers = [p.name for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(kept)]
    assert leftovers == []


@requires_gcc
def test_split_build_error_names_the_kept_unit(tmp_path):
    with pytest.raises(CompileError) as err:
        build_library(FUNCS, "m", cache=CompileCache(tmp_path, jobs=2), flags=FLAGS + ("-Dkiln_body_add3=)",))
    msg = str(err.value)
    assert "error" in msg and "kept" in msg
    kept = [p for p in tmp_path.rglob("*.c") if str(p) in msg]
    assert kept and "kiln_body_add3" in kept[0].read_text()
    assert not list(tmp_path.rglob("*.so*"))


def test_a_rendering_is_used_only_for_the_body_it_renders():
    f = FUNCS[0]
    fake = dataclasses.replace(render(f), code=render(f).code + "/* carried */")
    assert "/* carried */" in generate([dataclasses.replace(f, attrs=((RENDERED_ATTR, fake),))]).code
    rewritten = dataclasses.replace(f, body=dataclasses.replace(f.body), attrs=((RENDERED_ATTR, fake),))  # a pass ran
    assert "/* carried */" not in generate([rewritten]).code


def test_default_jobs_counts_idle_cpus(monkeypatch):
    monkeypatch.setattr(cache_mod.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(cache_mod.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert cache_mod.default_jobs() == 8  # only this process runs
    monkeypatch.setattr(cache_mod.os, "getloadavg", lambda: (6.2, 1.0, 1.0))
    assert cache_mod.default_jobs() == 3
    monkeypatch.setattr(cache_mod.os, "getloadavg", lambda: (20.0, 1.0, 1.0))
    assert cache_mod.default_jobs() == 1
    assert CompileCache("x", jobs=4).jobs == 4


@requires_gcc
def test_units_include_the_runtime_header_precompiled_once(tmp_path):
    """Every unit of a split build includes kiln_runtime.h from one precompiled copy in the cache (gcc -H marks
    a precompiled header it used with '!'), and the library computes what it computed without it."""
    cache = CompileCache(tmp_path, jobs=2)
    build_library(FUNCS, "m", cache=cache)
    (gch,) = tmp_path.rglob("kiln_runtime.h.gch")
    units = [p for p in tmp_path.rglob("*.c") if p.read_text().startswith("#include")]
    assert len(units) == 2 and all(f'#include "{gch.with_suffix("")}"' in u.read_text() for u in units)
    shown = subprocess.run(["gcc", *object_flags(FLAGS), "-H", "-o", str(tmp_path / "x.o"), str(units[0])],
                           capture_output=True, text=True)
    assert f"! {gch}" in shown.stderr
