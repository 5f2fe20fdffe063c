"""How long the kernels' OpenMP threads spin before they sleep.

A thread of libgomp's team that has no work (a worker between parallel loops, the caller at a loop's
closing barrier) spins, then sleeps on a futex. By default it spins for 300,000 pauses: about 7.5 ms
on this machine's CPU (25 ns a pause). That is ideal on an idle machine and a disaster on a busy one.
When another process shares a core, a spinning Kiln thread burns its share of that core on waiting.
The scheduler then runs the other process when Kiln's thread has real work. The rest of the team
waits for it at every loop's barrier.

Measured on 2 cores with one busy process beside the model (2 threads, medians of 30-100 runs, one
process per setting; ORT 1.31 in the same conditions):

| model | default spin ms (p90) | 1000 spins ms (p90) | ORT ms |
| --- | --- | --- | --- |
| resnet50, busy process pinned to core 1 | 101-114 (220) | 72-76 (73-82) | 89-101 |
| resnet50, busy process unpinned | 135-142 (215-220) | 73-76 (75-81) | 86-98 |
| mobilenet_v2, busy process unpinned | 14.6-14.8 (15-17) | 10.6-10.7 (11.2) | 8.1-14.7 |

On an idle machine the two settings were within noise: resnet50 33.5-35.8 ms, mobilenet_v2 3.8-4.0 ms,
the MLP 50-57 us either way. About 1000 pauses (25 us) covers the gap between two kernels of one AOT
run, so an idle machine keeps its threads awake. With fewer spins the threads sleep inside a run:
300 spins cost mobilenet_v2 6-23%, 100 spins 48-60%. Values between 3000 and 10000 were the worst under
load: a thread spins long enough to lose its core, but not long enough to bridge a slice.

libgomp reads GOMP_SPINCOUNT once, when the process first loads it. So the setting is made before Kiln
loads its first kernel library. A value the user has set is kept, and so is whatever an OpenMP
runtime already loaded into the process has read.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import MutableMapping
from typing import Any

SPIN_COUNT = 1000


def configure(env: MutableMapping[str, str] = os.environ) -> None:
    """Set Kiln's spin count for libgomp in `env` (the process's, or a child's), unless it has one."""
    env.setdefault("GOMP_SPINCOUNT", str(SPIN_COUNT))


def set_num_threads(library) -> Any:
    """omp_set_num_threads of the OpenMP runtime a kernel library's kernels use (the library's own
    libgomp, or the process's when the linker dropped it); None without kernels or OpenMP."""
    return _omp_function(library, "omp_set_num_threads")


def get_max_threads(library) -> Any:
    """omp_get_max_threads of the same OpenMP runtime as set_num_threads(library), to restore a
    calling thread's setting after borrowing it; None without kernels or OpenMP."""
    return _omp_function(library, "omp_get_max_threads")


def _omp_function(library, name: str) -> Any:
    """`name` from the library's own libgomp, else from the process's; None without kernels or OpenMP."""
    if library is None:
        return None
    fn = getattr(library.lib, name, None)
    if fn is None:
        gomp = ctypes.util.find_library("gomp")
        configure()
        fn = getattr(ctypes.CDLL(gomp), name, None) if gomp else None
    return fn
