"""The one place a compiled library enters the process.

A kernel library may call into two runtimes loaded before it: libgomp (OpenMP threading; its spin
count is read once, when it loads: kiln.codegen.openmp_env) and Kiln's thread pool (Kiln threading:
kernels resolve kiln_parallel_launch at dlopen, so the pool is loaded first, with RTLD_GLOBAL).
Both are set up here before every kernel library, whichever threading it was built with.
"""

from __future__ import annotations

import ctypes
import os

from kiln.codegen import openmp_env, pool_library


def load_library(path: str | os.PathLike, pool: str | os.PathLike | None = None, cc: str = "gcc") -> ctypes.CDLL:
    """The kernel library at `path`, after libgomp's setting and the process's pool (the one already
    loaded, else the library at `pool`, else the one built for this machine by `cc`)."""
    openmp_env.configure()
    pool_library.load(pool, cc)
    return ctypes.CDLL(str(path))


def load_standalone(path: str | os.PathLike) -> ctypes.CDLL:
    """A library that calls no Kiln runtime (the shape-generic kernels, kiln.codegen.generic_library):
    only libgomp's setting comes first, so loading it never builds the pool."""
    openmp_env.configure()
    return ctypes.CDLL(str(path))
