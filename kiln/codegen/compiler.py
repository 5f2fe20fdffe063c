"""Invoking the C compiler. The flags live here and nowhere else."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kiln.errors import CompileError, CompilerNotFoundError  # noqa: F401  (re-exported)

# -fno-math-errno: nothing reads errno, and it lets gcc vectorize sqrt and friends.
# -mprefer-vector-width=512: on AVX-512 hosts -march=native still vectorizes with 256-bit vectors (a tuning
# for older Intel parts that clock down), half the FMA rate of a part with two 512-bit FMA ports: resnet50
# 46.1 -> 33.3 ms, mobilenet_v2 4.05 -> 2.83 ms, BERT 17.0 -> 12.8 ms (2 threads, Xeon with AVX-512). A no-op
# on hosts without AVX-512
# -fno-tree-loop-distribute-patterns: a kernel whose epilogue only copies its register tile out (a conv with no
# bias or activation: Winograd's batched products, projections) had that copy turned into a memcpy from the
# accumulator array, which pins the array in memory: every FMA then read and wrote its accumulator on the stack.
# AVX2 (AMD EPYC), 2 threads, the same AOT built both ways, alternating: resnet50 0.857x, resnet18 0.790x,
# mobilenet_v2 0.963x, BERT 0.947x, MLP 0.990x; resnet50's Winograd product alone 30.5 -> 67.6 GFLOP/s
# -fno-trapping-math: a select whose arm divides (erf's rational, so GELU) stayed a branch, because gcc may not
# speculate an operation that could raise a floating-point trap, and a branch keeps the loop scalar: a dense's
# fused GELU cost 9 ns per element. Kiln reads no floating-point exception flags and changes no rounding mode;
# values and NaN handling are unchanged (that would be -ffast-math's -ffinite-math-only). AVX2 (AMD EPYC), the same
# AOT built both ways, alternating: BERT 0.80x, 0.85x (2 threads) and 0.80x (1); mobilenet_v2 0.93-1.05x,
# resnet18 1.00x, resnet50 1.01x, MLP 0.98-1.03x (noise)
FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fwrapv", "-shared", "-fPIC",
                          "-std=gnu11", "-mprefer-vector-width=512", "-fno-tree-loop-distribute-patterns",
                          "-fno-trapping-math")
LIBS: tuple[str, ...] = ("-lm",)
ERROR_LINES = 12  # how much of gcc's complaint an error message quotes


def compile_shared(source: Path, output: Path, cc_path: str, flags: tuple[str, ...] = FLAGS) -> None:
    """Compile one C file into a shared library at `output`."""
    _check(subprocess.run([cc_path, *flags, "-o", str(output), str(source), *LIBS], capture_output=True, text=True),
           cc_path, f"generated source {source}")


def object_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    """The flags that compile one translation unit of a library (`-c`, not `-shared`)."""
    return tuple(f for f in flags if f != "-shared") + ("-c",)


def compile_object(source: Path, output: Path, cc_path: str, flags: tuple[str, ...] = FLAGS) -> None:
    """Compile one translation unit of a library into an object file (`flags` are the library's)."""
    _check(subprocess.run([cc_path, *object_flags(flags), "-o", str(output), str(source)], capture_output=True,
                          text=True), cc_path, f"generated source {source}")


def compile_header(header: Path, output: Path, cc_path: str, flags: tuple[str, ...] = FLAGS) -> None:
    """Precompile a header at `output` for translation units compiled with `flags` (a library's)."""
    hflags = tuple(f for f in object_flags(flags) if f != "-c")
    _check(subprocess.run([cc_path, *hflags, "-x", "c-header", "-o", str(output), str(header)], capture_output=True,
                          text=True), cc_path, f"header {header}")


def link_shared(objects: list[Path], output: Path, cc_path: str, flags: tuple[str, ...] = FLAGS) -> None:
    """Link object files into one shared library (the flags carry -shared and -fopenmp)."""
    _check(subprocess.run([cc_path, *flags, "-o", str(output), *map(str, objects), *LIBS], capture_output=True,
                          text=True), cc_path, f"objects {', '.join(o.name for o in objects)}")


def _check(proc: subprocess.CompletedProcess, cc_path: str, what: str) -> None:
    if proc.returncode != 0:
        lines = proc.stderr.splitlines()
        errors = [ln for ln in lines if "error" in ln] or lines
        raise CompileError(
            f"{Path(cc_path).name} failed (exit {proc.returncode}) on {what} "
            f"(kept for inspection):\n" + "\n".join(errors[:ERROR_LINES]))
