"""The process-wide runtime: Kiln's thread pool and the core partitions sessions run on.

One per process, shared by every session (as ONNX Runtime's environment shares its pools). It
configures the pool (kiln/codegen/pool: how many cores, how long an idle worker spins, whether
worker i is pinned to core i) from `kiln.configure_runtime`, the `kiln` command's global options or
the environment (KILN_CORES, KILN_SPIN_US, KILN_PIN), and hands out partitions: a session's
`threads=` becomes a range of that many cores, disjoint from the other sessions' ranges where the
cores allow (else the least shared range). Executors bind the calling thread's partition to it
around each entry call (`running`): kernels built with -threading=kiln launch onto that range's
workers; OpenMP kernels ignore it.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

from kiln.codegen import pool_library
from kiln.errors import KilnError
from kiln.target import host_cores

DEFAULT_SPIN_US = 25  # bridges the gap between two kernels of one run (see kiln.codegen.openmp_env)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class RuntimeConfig:
    """The pool's settings: `cores` workers' cores (the caller of a launch is the first of its range),
    `spin_us` microseconds an idle worker spins before it sleeps, `pin` worker i to the i-th CPU."""

    cores: int
    spin_us: int = DEFAULT_SPIN_US
    pin: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1:
            raise KilnError(f"runtime cores={self.cores!r}: expected a positive integer")
        if isinstance(self.spin_us, bool) or not isinstance(self.spin_us, int) or self.spin_us < 0:
            raise KilnError(f"runtime spin_us={self.spin_us!r}: expected a non-negative integer (microseconds)")
        if not isinstance(self.pin, bool):
            raise KilnError(f"runtime pin={self.pin!r}: expected True or False")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> RuntimeConfig:
        """The settings KILN_CORES, KILN_SPIN_US and KILN_PIN give; the host's cores where unset."""
        return cls(_env_int(env, "KILN_CORES", host_cores()), _env_int(env, "KILN_SPIN_US", DEFAULT_SPIN_US),
                   _env_bool(env, "KILN_PIN"))


@dataclass(frozen=True)
class Partition:
    """Cores [first, first + cores) of the pool."""

    first: int
    cores: int


class Runtime:
    """The pool and the partitions handed out of it (see the module doc). Use `runtime()`."""

    def __init__(self, config: RuntimeConfig):
        self.config = config
        self._lock = threading.Lock()
        self._use = [0] * config.cores  # partitions holding each core

    def pool(self) -> ctypes.CDLL:
        """The process's pool library, configured with this runtime's settings."""
        global _applied
        lib = pool_library.load()
        if _applied is not self.config:  # settings are replaced, never changed in place
            with self._lock:
                c = self.config
                if lib.kiln_pool_configure(c.cores, c.spin_us, int(c.pin)) != 0:
                    raise KilnError(f"the thread pool refused {c}")
                _applied = c
        return lib

    def configure(self, **changes: int | bool) -> RuntimeConfig:
        """New settings (RuntimeConfig's fields); partitions already handed out keep their ranges."""
        with self._lock:
            self.config = replace(self.config, **changes)
            self._use = (self._use + [0] * self.config.cores)[:self.config.cores]
        return self.config

    def acquire(self, threads: int | None) -> Partition:
        """A partition of `threads` cores (all of them for None or more than there are): the
        range shared with the fewest other partitions, the lowest such."""
        with self._lock:
            n = len(self._use)
            width = n if threads is None else max(1, min(threads, n))
            first = min(range(n - width + 1), key=lambda f: (sum(self._use[f:f + width]), f))
            for core in range(first, first + width):
                self._use[core] += 1
            return Partition(first, width)

    def release(self, part: Partition) -> None:
        with self._lock:
            for core in range(part.first, min(part.first + part.cores, len(self._use))):
                self._use[core] = max(0, self._use[core] - 1)

    def default_partition(self) -> Partition:
        """Where a thread that no session bound runs: every core."""
        return self._all

    @property
    def config(self) -> RuntimeConfig:
        return self._config

    @config.setter
    def config(self, config: RuntimeConfig) -> None:
        self._config, self._all = config, Partition(0, config.cores)


_runtime: Runtime | None = None  # NOTE: process-wide by design: one pool per process
_runtime_lock = threading.Lock()
_applied: RuntimeConfig | None = None  # the settings the process's pool holds
_bound = threading.local()  # per thread: depth of `running` blocks, the thread's run block


def runtime() -> Runtime:
    """The process's runtime, made from the environment on first use."""
    global _runtime
    if _runtime is not None:  # every run asks: no lock once made
        return _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(RuntimeConfig.from_env())
        return _runtime


def configure_runtime(cores: int | None = None, spin_us: int | None = None, pin: bool | None = None) -> RuntimeConfig:
    """Set the process's pool: cores, idle spin in microseconds, pinning (None keeps a setting).
    Applies to launches from now on; every session in the process shares it."""
    changes = {k: v for k, v in (("cores", cores), ("spin_us", spin_us), ("pin", pin)) if v is not None}
    return runtime().configure(**changes)


class running:
    """Within this block the calling thread's launches run on `partition` (default: every core) under
    run block `run` (a kiln_run_new handle; default: the thread's own), bound with kiln_run_begin.
    Nested blocks keep the outer binding, so a session (which names its partition) and the executor
    it calls (which does not) bind once."""

    __slots__ = ("partition", "run", "_pool")

    def __init__(self, partition: Partition | None = None, run: ctypes.c_void_p | None = None):
        self.partition, self.run = partition, run

    def __enter__(self) -> None:
        depth = getattr(_bound, "depth", 0)
        if depth:
            _bound.depth = depth + 1
            return
        rt = runtime()
        self._pool = pool = rt.pool()
        run = self.run
        if run is None:
            block = getattr(_bound, "run", None) or _RunBlock(pool)
            _bound.run, run = block, block.handle
        part = self.partition or rt.default_partition()
        pool.kiln_run_begin(run, part.first, part.cores)
        _bound.depth = 1

    def __exit__(self, *exc: object) -> None:
        _bound.depth -= 1
        if not _bound.depth:
            self._pool.kiln_run_end()


class _RunBlock:
    """A thread's run control block, freed with the thread's locals."""

    def __init__(self, pool: ctypes.CDLL):
        self.pool, self.handle = pool, ctypes.c_void_p(pool.kiln_run_new())

    def __del__(self) -> None:
        self.pool.kiln_run_free(self.handle)


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise KilnError(f"the environment variable {name}={text!r}: expected an integer") from None


def _env_bool(env: Mapping[str, str], name: str) -> bool:
    text = env.get(name, "").strip().lower()
    if text in _TRUE or text in _FALSE or not text:
        return text in _TRUE
    raise KilnError(f"the environment variable {name}={text!r}: expected 1 or 0")
