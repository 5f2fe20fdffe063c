"""Kiln's thread pool as a loaded library: built once per machine, loaded once per process.

The pool (kiln/codegen/pool/kiln_pool.c, the ABI in kiln_pool.h) is compiled by gcc into the compile
cache like a kernel library (content-addressed, atomic), but without -march=native: a compiled model
carries a copy (kiln.runtime.artifact) that must load on any CPU its kernels load on. It is loaded
with RTLD_GLOBAL before any kernel library (kiln.codegen.loader), so that every kernel library
resolves kiln_parallel_launch to it at dlopen and every session in the process shares its workers.
A process holds one pool: the first one loaded stays (a second copy would start a second set of
workers competing for the same cores).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from kiln.errors import KilnError

if TYPE_CHECKING:
    from kiln.codegen.cache import CompileCache

POOL_DIR = Path(__file__).with_name("pool")
HEADER = Path(__file__).with_name("kiln_pool.h")
SOURCE = POOL_DIR / "kiln_pool.c"
ABI = 2  # KILN_POOL_ABI of kiln_pool.h
FLAGS: tuple[str, ...] = ("-O2", "-fPIC", "-shared", "-pthread", "-std=gnu11")

_lock = threading.Lock()
_loaded: ctypes.CDLL | None = None  # NOTE: process-wide by nature: the pool is the process's


def source() -> str:
    """The pool's C as one translation unit (the header pasted where it is included: the compile cache
    builds from a copy of the source, with no include path)."""
    return SOURCE.read_text().replace(f'#include "{HEADER.name}"', HEADER.read_text(), 1)


def build(cc: str = "gcc", cache: CompileCache | None = None) -> Path:
    """The pool library for this machine's compiler, from the compile cache or built into it
    (CompilerNotFoundError without `cc`)."""
    # NOTE: imported here: the compile cache pulls in the C generator's module splitting, which a process
    # that loads a compiled model (carrying its pool) never needs
    from kiln.codegen.cache import CompileCache

    return (cache or CompileCache()).build(source(), cc, FLAGS)


def library_path() -> Path:
    """The file of the process's pool (loading it first if need be): what a compiled model carries."""
    return Path(load()._name)


def load(path: str | os.PathLike | None = None, cc: str = "gcc") -> ctypes.CDLL:
    """The process's pool: the one already loaded, else the library at `path` (a compiled model's
    copy), else the one built for this machine. Refuses a library of another ABI version."""
    global _loaded
    if _loaded is not None:  # every run asks: no lock once loaded
        return _loaded
    with _lock:
        if _loaded is None:
            lib_path = Path(path) if path is not None else build(cc)
            try:
                lib = ctypes.CDLL(str(lib_path), mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                raise KilnError(f"Kiln's thread pool library {lib_path} cannot be loaded ({e})") from None
            abi = getattr(lib, "kiln_pool_abi", None)
            version = abi() if abi is not None else None
            if version != ABI:
                raise KilnError(f"Kiln's thread pool library {lib_path} has ABI version {version}; this Kiln needs "
                                f"{ABI}: compile the model again")
            _declare(lib, ctypes.PyDLL(str(lib_path), mode=ctypes.RTLD_GLOBAL))
            _loaded = lib
        return _loaded


def _declare(lib: ctypes.CDLL, holding: ctypes.PyDLL) -> None:
    """ctypes signatures of the functions Python calls. Binding, unbinding and cancelling a run are a
    few stores each: they are called through `holding` (the same library as a PyDLL), which keeps the
    GIL. A CDLL call lets the GIL go and takes it back after, and taking it back waits for whichever
    thread got it meanwhile (up to the interpreter's switch interval, 5 ms, behind a thread running
    Python): a wait with nothing to gain on the paths of a cancel and of a preempted run's resume."""
    i32, ptr = ctypes.c_int32, ctypes.c_void_p
    quick = ("kiln_run_begin", "kiln_run_end", "kiln_run_cancel")
    for name, res, args in (("kiln_pool_abi", i32, []), ("kiln_pool_cores", i32, []),
                            ("kiln_pool_configure", i32, [i32, i32, i32]), ("kiln_run_new", ptr, []),
                            ("kiln_run_free", None, [ptr]), ("kiln_run_begin", None, [ptr, i32, i32]),
                            ("kiln_run_end", None, []), ("kiln_run_cancel", None, [ptr]),
                            ("kiln_run_enter_step", i32, [i32]),
                            ("kiln_run_wait", ctypes.c_int64, [ptr, ctypes.c_int64])):
        fn = getattr(holding if name in quick else lib, name)
        fn.restype, fn.argtypes = res, args
        setattr(lib, name, fn)
