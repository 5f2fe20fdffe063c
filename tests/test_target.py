"""kiln.Target: host detection, the string form, partial strings, errors, and the target reaching
schedules, cache keys, compiler flags and artifacts."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.codegen.compiler import FLAGS
from kiln.compiler.fuse import fuse
from kiln.compiler.kernel_cache import kernel_key
from kiln.compiler.lower import lower_groups
from kiln.errors import KilnError
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.op import get_op
from kiln.runtime.executor import primitive_functions
from kiln.target import DEFAULT_THREADING, ISA_FEATURES, Target
from kiln.transform import PassContext

KILN = Path(kiln.__file__).resolve().parent


def test_host_detection_gives_sane_values():
    host = Target.host()
    assert host is Target.host()  # detected once
    assert host.kind == "c" and host.arch and host.cores >= 1 and host.cc == "gcc"
    assert host.features <= ISA_FEATURES
    assert host.vector_bits in (128, 256, 512) and host.vector_registers in (16, 32)
    assert 4 << 10 <= host.l1d_bytes <= host.l2_bytes <= max(host.l2_bytes, host.l3_bytes)


def test_print_parse_round_trip():
    host = Target.host()
    assert Target.parse(str(host)) == host
    other = Target("c", "x86_64", frozenset({"avx", "avx2", "fma"}), 256, 16, 48 << 10, 1280 << 10, 30 << 20, 6)
    text = str(other)
    assert text == ("c -arch=x86_64 -features=avx,avx2,fma -vector-bits=256 -vector-registers=16 -l1d=48K "
                    f"-l2=1280K -l3=30M -cores=6 -cc=gcc -threading={DEFAULT_THREADING}")
    assert Target.parse(text) == other and str(Target.parse(text)) == text
    kiln_threads = dataclasses.replace(other, threading="kiln")
    assert str(kiln_threads).endswith(" -threading=kiln") and Target.parse(str(kiln_threads)) == kiln_threads
    assert kiln_threads.key != other.key  # caches keep the two threadings apart


def test_partial_strings_take_the_rest_from_the_host():
    host = Target.host()
    assert Target.parse("c -cores=4") == dataclasses.replace(host, cores=4)
    assert Target.parse("c") == host and Target.parse(None) == host and Target.parse("") == host
    wide = Target.parse("c -vector-bits=512")
    assert (wide.vector_bits, wide.vector_registers, wide.features) == (512, 32, host.features)
    avx512 = Target.parse("c -features=avx2,avx512f,fma")
    assert (avx512.vector_bits, avx512.vector_registers) == (512, 32)
    assert Target.parse("c -l2=2M -vector-registers=16").l2_bytes == 2 << 20


@pytest.mark.parametrize("text, named", [
    ("cuda", "'cuda'"), ("c -bogus=1", "-bogus=1"), ("c cores=2", "cores=2"), ("c -cores", "-cores"),
    ("c -cores=zero", "-cores=zero"), ("c -l2=big", "-l2=big"), ("c -features=avx9", "avx9"),
    ("c -threading=tbb", "-threading=tbb"),
])
def test_unknown_kinds_options_and_values_are_errors_naming_them(text, named):
    with pytest.raises(KilnError, match=re.escape(named)):
        Target.parse(text)


def test_key_is_stable_and_differs_by_target():
    host = Target.host()
    assert host.key == Target.parse(str(host)).key and re.fullmatch(r"c-[0-9a-f]{16}", host.key)
    assert dataclasses.replace(host, cores=host.cores + 1).key != host.key


def test_compiler_flags_native_for_the_host_explicit_otherwise():
    openmp, kiln_threads = (dataclasses.replace(Target.host(), threading=t) for t in ("openmp", "kiln"))
    assert openmp.compiler_flags(FLAGS) == FLAGS
    # Kiln threading keeps `omp simd` and links no OpenMP runtime
    assert kiln_threads.compiler_flags(FLAGS) == tuple("-fopenmp-simd" if f == "-fopenmp" else f for f in FLAGS)
    v3 = Target.parse("c -arch=x86_64 -features=avx,avx2,fma,f16c -threading=openmp")
    flags = v3.compiler_flags(FLAGS)
    assert "-march=native" not in flags and {"-march=x86-64", "-mavx2", "-mfma", "-mf16c", "-mavx"} <= set(flags)
    assert flags[-len(FLAGS) + 2:] == FLAGS[2:]  # the other flags unchanged, in order


def test_missing_features_and_core_note():
    host = Target.host()
    assert host.missing_features() == [] and host.cores_note() is None
    more = dataclasses.replace(host, features=host.features | {"amx_int8", "sve2"}, cores=host.cores + 1)
    assert more.missing_features() == sorted({"amx_int8", "sve2"} - host.features)
    assert f"built for {host.cores + 1} cores, this machine has {host.cores}" in more.cores_note()


def _dense_model() -> IRModule:
    a = Var("a", TensorType((12, 64), "float32"))
    w = Constant(np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32))
    return IRModule({"main": Function((a,), get_op("nn.relu")(get_op("linalg.mat_mul")(a, w)))})


def _panel(target: Target) -> tuple[int, str]:
    """(the packed panel width pack-dense chose, the kernel's C) for `target`."""
    from kiln.codegen.c_source import generate

    fused = fuse(_dense_model(), 2, PassContext(2, target=target))
    kernels, _, host = lower_groups(fused, target=target)
    assert not host
    packed = [e for fn in fused.functions.values() for e in _calls(fn) if e.op.name == "linalg.dense_packed"]
    return packed[0].args[1].type.shape[-1], generate([k.func for k in kernels]).code


def _calls(fn):
    from kiln.ir.expr import Call, Op
    from kiln.ir.visitor import post_order
    return [e for e in post_order(fn) if isinstance(e, Call) and isinstance(e.op, Op)]


def test_dense_panel_width_differs_between_256_and_512_bit_targets(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    (narrow, narrow_c), (wide, wide_c) = (_panel(Target.parse(f"c -vector-bits={b}")) for b in (256, 512))
    assert (narrow, wide) == (16, 32) and narrow_c != wide_c


def test_schedules_by_target_kind_unknown_kind_is_an_error():
    from kiln.codegen.lower_fused import lower_primitive
    fused = fuse(_dense_model(), 2)
    fn = primitive_functions(fused)[0]
    with pytest.raises(KilnError, match="no schedules for target kind 'sim'"):
        lower_primitive(fn, "g", target=dataclasses.replace(Target.host(), kind="sim"))


def test_kernel_cache_key_includes_the_target():
    fused = fuse(_dense_model(), 2)
    fn = primitive_functions(fused)[0]
    host = Target.host()
    assert kernel_key(fn, None, host.key) != kernel_key(fn, None, dataclasses.replace(host, cores=99).key)


def test_build_with_a_target_string_runs_and_exports_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    cm = kiln.build(_dense_model(), "c -cores=1")
    assert cm.target == dataclasses.replace(Target.host(), cores=1)
    a = np.random.default_rng(1).standard_normal((12, 64)).astype(np.float32)
    np.testing.assert_allclose(cm.run({"a": a})[0], kiln.evaluate(_dense_model(), {"a": a})[0], rtol=1e-5, atol=1e-5)
    out = cm.export(tmp_path / "m")
    meta = __import__("json").loads((out / "model.json").read_text())
    assert meta["target"] == str(cm.target)
    with pytest.raises(KilnError, match="unknown target option '-nope=1'"):
        kiln.build(_dense_model(), "c -nope=1")


def test_build_for_a_foreign_isa_fails_to_load_here(tmp_path, monkeypatch):
    """An artifact for a target with a feature this CPU lacks is refused with the features named."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    host = Target.host()
    cm = kiln.build(_dense_model(), host)
    foreign = dataclasses.replace(host, features=host.features | {"amx_tile", "sve"})
    out = dataclasses.replace(cm, target=foreign).export(tmp_path / "m")
    lacking = sorted({"amx_tile", "sve"} - host.features)
    with pytest.raises(KilnError, match=f"compiled for a CPU with {', '.join(lacking)}, which this CPU lacks"):
        kiln.load(out)


def test_import_kiln_prints_the_host_target():
    out = subprocess.run([sys.executable, "-c", "import kiln; print(kiln.Target.host())"], capture_output=True,
                         text=True, check=True, cwd=KILN.parent).stdout.strip()
    assert out == str(Target.host())


def test_only_the_target_module_reads_the_machine():
    """No /proc/cpuinfo, sysfs or os.cpu_count under kiln/ outside kiln/target.py."""
    pattern = re.compile(r"cpuinfo|/sys/devices|cpu_count")
    found = [f"{p.relative_to(KILN)}:{n}" for p in sorted(KILN.rglob("*.py")) if p.name != "target.py" or
             p.parent != KILN for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
