"""Kiln's shape-generic kernels (kiln/codegen/generic/kiln_generic.c) as a loaded library.

The first tier of a session (kiln.runtime.generic_executor) runs on it while the model's own kernels
compile, so it must not depend on the model: every size is an argument. It is compiled by gcc into the
compile cache like a kernel library, with the target's flags (content-addressed: built once per machine,
target and compiler), and loaded once per process and target.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

from kiln.codegen.compiler import FLAGS
from kiln.codegen.loader import load_standalone
from kiln.errors import KilnError
from kiln.target import Target

SOURCE = Path(__file__).with_name("generic") / "kiln_generic.c"
ABI = 5  # KILN_GENERIC_ABI of kiln_generic.c

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}  # NOTE: per process: a library loaded once serves every session


# -O3 less its costly passes: the hot loops are written with vectors, and this library's gcc time is part of a
# new machine's first result (measured: the same kernel speed as -O3, a third less compile time)
OPTIMIZE = ("-O2", "-ftree-vectorize", "-fvect-cost-model=dynamic")


def flags(target: Target) -> tuple[str, ...]:
    """The target's kernel flags with OpenMP always on (the generic kernels parallelize with OpenMP whatever
    threading the target's own kernels use) and OPTIMIZE for -O3."""
    out: list[str] = []
    for f in target.compiler_flags(FLAGS):
        out.extend(OPTIMIZE if f == "-O3" else ("-fopenmp" if f == "-fopenmp-simd" else f,))
    return tuple(out)


def build(target: Target) -> Path:
    """The library for `target`, from the compile cache or built into it (CompilerNotFoundError without gcc)."""
    # NOTE: imported here, as in pool_library: the cache pulls in the C generator's module splitting
    from kiln.codegen.cache import CompileCache

    return CompileCache().build(SOURCE.read_text(), target.cc, flags(target))


def prefetch(target: Target) -> None:
    """Start loading the library for `target` (building it where the cache lacks it) on a daemon thread, so
    that gcc runs while the caller does other work; a later `load` waits for it (the lock) and reports
    any error itself."""

    def quietly() -> None:
        try:
            load(target)
        except KilnError:  # the caller's own load raises it, where it can be handled
            pass

    threading.Thread(target=quietly, name="kiln-generic-library", daemon=True).start()


def load(target: Target) -> ctypes.CDLL:
    """The generic kernels for `target`, loaded (and built first where the cache lacks them)."""
    key = str(target)
    lib = _loaded.get(key)
    if lib is not None:
        return lib
    with _lock:
        if key not in _loaded:
            lib = load_standalone(build(target))
            version = lib.kiln_generic_abi()
            if version != ABI:
                raise KilnError(f"Kiln's generic kernel library has ABI version {version}; this Kiln needs {ABI}")
            _declare(lib)
            _loaded[key] = lib
        return _loaded[key]


def _declare(lib: ctypes.CDLL) -> None:
    """ctypes signatures of the kernels (sizes are int64; tensors, shapes and geometry pointers)."""
    i64, ptr, i32, f32, f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_double
    for name, args in (("kiln_gemm", [ptr, ptr, ptr, ptr, ptr, ptr, ptr, f32, f32]),
                       ("kiln_conv2d", [i64, i64, i64, i64, i64, i64, ptr, ptr, ptr, ptr, ptr, ptr, f32, f32, ptr]),
                       ("kiln_pack_a", [i64, i64, i64, ptr, ptr]),
                       ("kiln_pool2d", [i64, i64, i64, ptr, i32, ptr, ptr]),
                       ("kiln_plane_mean", [i64, i64, ptr, ptr]),
                       ("kiln_channel_affine", [i64, i64, i64, ptr, ptr, ptr, ptr]),
                       ("kiln_clamp", [i64, ptr, f32, f32, ptr]),
                       ("kiln_add", [i64, ptr, ptr, ptr]),
                       ("kiln_erf", [i64, ptr, ptr]),
                       ("kiln_softmax", [i64, i64, ptr, ptr]),
                       ("kiln_layer_norm", [i64, i64, ptr, ptr, ptr, f64, ptr, ptr, ptr])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = None, args
    lib.kiln_tile_rows.restype, lib.kiln_tile_rows.argtypes = ctypes.c_int, []
