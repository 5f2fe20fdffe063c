"""The measuring process on hand-written kernels of the generated modules' ABI."""

import numpy as np

from kiln.codegen.cache import CompileCache
from kiln.tune.measure import KernelSpec, MeasureOptions, run_kernels
from tests.tune.conftest import requires_gcc

SOURCE = r"""
#include <stdint.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
typedef union { int64_t i; double f; void* p; } kiln_value_t;

int32_t twice(const kiln_value_t* args, int32_t n) {
    const float* x = (const float*)args[0].p; float* y = (float*)args[1].p;
    for (int i = 0; i < 256; i++) y[i] = 2 * x[i];
    return 0;
}
int32_t hang(const kiln_value_t* args, int32_t n) { for (;;) sleep(1); return 0; }
int32_t crash(const kiln_value_t* args, int32_t n) { raise(SIGSEGV); return 0; }
int32_t fails(const kiln_value_t* args, int32_t n) { return -2; }
int32_t chatty(const kiln_value_t* args, int32_t n) { printf("not json\n{\"i\": 0\n"); fflush(stdout); return 0; }
"""

ARGS = ({"role": "input", "dtype": "<f4", "shape": [256]}, {"role": "output", "dtype": "<f4", "shape": [256]})
FAST = MeasureOptions(threads=1, timeout=1.0, repeats=3, min_seconds=0.0)


def _lib(tmp_path) -> str:
    return str(CompileCache(tmp_path / "cache").build(SOURCE))


@requires_gcc
def test_a_kernel_is_timed_in_a_child_process(tmp_path):
    lib = _lib(tmp_path)
    [res] = run_kernels([KernelSpec(lib, "twice", ARGS)], FAST)
    assert res.ok and res.seconds > 0 and len(res.repeats) == 3
    assert res.seconds == float(np.median(res.repeats))


@requires_gcc
def test_a_hanging_kernel_is_killed_and_the_rest_of_the_batch_still_measured(tmp_path):
    lib = _lib(tmp_path)
    specs = [KernelSpec(lib, "twice", ARGS), KernelSpec(lib, "hang", ARGS), KernelSpec(lib, "twice", ARGS)]
    res = run_kernels(specs, FAST)
    assert [r.ok for r in res] == [True, False, True]
    assert res[1].error.startswith("timeout")


@requires_gcc
def test_crashes_errors_and_missing_symbols_are_failures_not_exceptions(tmp_path):
    lib = _lib(tmp_path)
    specs = [KernelSpec(lib, "crash", ARGS), KernelSpec(lib, "fails", ARGS), KernelSpec(lib, "nope", ARGS),
             KernelSpec(str(tmp_path / "missing.so"), "twice", ARGS), KernelSpec(lib, "twice", ARGS)]
    res = run_kernels(specs, FAST)
    assert [r.ok for r in res] == [False, False, False, False, True]
    assert res[0].error.startswith("crash") and "SIGSEGV" in res[0].error
    assert "error code -2" in res[1].error
    assert res[2].error.startswith("error") and res[3].error.startswith("error")


@requires_gcc
def test_what_a_kernel_prints_does_not_confuse_the_parent(tmp_path):
    lib = _lib(tmp_path)
    res = run_kernels([KernelSpec(lib, "chatty", ARGS), KernelSpec(lib, "twice", ARGS)], FAST)
    assert [r.ok for r in res] == [True, True]


def test_the_child_runs_only_the_kernels_threads(monkeypatch):
    """The kernel's OpenMP team gets the thread count asked for and numpy's BLAS none of its own."""
    import subprocess

    import kiln.tune.measure as measure

    seen = {}

    def fake_popen(cmd, **kw):
        seen.update(kw["env"])
        raise OSError("not started")

    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    try:
        measure._run_child([KernelSpec("lib.so", "f", ())], MeasureOptions(threads=2))
    except OSError:
        pass
    assert seen["OMP_NUM_THREADS"] == "2" and seen["OPENBLAS_NUM_THREADS"] == "1" and seen["MKL_NUM_THREADS"] == "1"


@requires_gcc
def test_the_kernels_of_a_batch_are_timed_round_robin(tmp_path):
    """Each kernel is loaded and warmed up in turn, then timed one repeat of each in turn: candidates timed
    one after another on a machine whose speed drifts would be ranked by when they ran."""
    log = tmp_path / "calls.txt"
    source = r"""
#include <stdint.h>
#include <stdio.h>
typedef union { int64_t i; double f; void* p; } kiln_value_t;
static int32_t stamp(const char* who) {
    FILE* f = fopen("LOG", "a"); fputs(who, f); fclose(f); return 0;
}
int32_t a(const kiln_value_t* args, int32_t n) { return stamp("a"); }
int32_t b(const kiln_value_t* args, int32_t n) { return stamp("b"); }
""".replace("LOG", str(log))
    lib = str(CompileCache(tmp_path / "cache").build(source))
    res = run_kernels([KernelSpec(lib, "a", ARGS), KernelSpec(lib, "b", ARGS)], FAST)
    assert [r.ok for r in res] == [True, True] and all(len(r.repeats) == 3 for r in res)
    # warmup + calibration each, then one repeat of each in turn, each round starting one kernel later
    assert log.read_text() == "aa" + "bb" + "ab" + "ba" + "ab"
