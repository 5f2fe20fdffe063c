"""Whole-model specialization on input shapes, for models whose inputs have symbolic dims.

Such a model runs on the kernel-by-kernel executor: it binds dims at run time, compiles groups whose
dims stay open for the shapes they see, and returns to Python between kernels. A transformer exported
with dynamic batch and sequence axes ran 2.6x slower than ONNX Runtime that way, because the passes
never saw its shapes (shape arithmetic stays unfolded, attention is not recognized, nothing is packed
for a known row count) and every group is its own call. Yet a deployed model sees few distinct
shapes. So the first run at new input shapes builds the whole model for exactly those shapes ahead
of time (kiln.compiler.aot: static types, the full pipeline, one C entry), and later runs at those
shapes call that. At most MAX_SHAPES builds are kept, the least recently used going first. Shapes
whose static model cannot be built ahead of time (control flow, a shape computed from an input's
values) run on the kernel-by-kernel executor, and are remembered so that they are not tried again.

With `background` set (a tiered session's model, kiln.runtime.tiers), a new shape's build runs on a thread of
its own and the kernel-by-kernel executor answers meanwhile: no run waits for gcc. Runs at that shape move
to the build from the first one after it is done.

A build costs seconds, so a stream of ever new shapes (free-length text) must not pay one per run:
once MAX_SHAPES builds are held, a new shape gets one only on its second run, and after MAX_BUILDS
builds in all no more are made; the kernel-by-kernel executor, which serves any shape, runs the rest.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from kiln.errors import KilnError
from kiln.ir.input_check import check_input
from kiln.ir.module import IRModule

MAX_SHAPES = 4  # static builds kept per model: each holds its own packed weights and arena
MAX_BUILDS = 16  # static builds made per model in all, evicted ones included
MAX_REMEMBERED = 1024  # input shapes remembered (as refused, or as seen once)


class ShapeSpecialized:
    """run(feeds): the static build for the feeds' shapes (made on their first run, or their second
    once `limit` builds are held; none after `max_builds`), else `fallback`. `build_static(shapes)`
    is the compiler's: `source` built for those input shapes (one per parameter, in order)."""

    def __init__(self, source: IRModule, fallback: Any, build_static: Callable[[tuple], Any],
                 limit: int = MAX_SHAPES, max_builds: int = MAX_BUILDS):
        self.source, self.fallback, self._build = source, fallback, build_static
        self.limit, self.max_builds, self.builds = limit, max_builds, 0
        self.built: OrderedDict[tuple, Any] = OrderedDict()  # input shapes -> AotExecutor, most recent last
        self.refused: OrderedDict[tuple, str] = OrderedDict()  # input shapes -> why no static build
        self._seen: OrderedDict[tuple, None] = OrderedDict()  # shapes run once without a build
        self._building: set[tuple] = set()  # shapes whose background build is running
        self.background = False
        self._lock = threading.Lock()

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        params = self.source.main.params
        if len(feeds) != len(params) or not all(p.name in feeds for p in params):
            return self.fallback.run(feeds)  # it names what is missing or unknown
        dims: dict[str, int] = {}
        key = tuple(_shape(check_input(p.name, feeds[p.name], p.type, dims)) for p in params)
        with self._lock:
            static = self._static_for(key)
        return (static or self.fallback).run(feeds)

    def _static_for(self, key: tuple) -> Any:
        static = self.built.get(key)
        if static is not None:
            self.built.move_to_end(key)
            return static
        if key in self.refused or key in self._building or None in key or self.builds >= self.max_builds:
            return None
        if len(self.built) >= self.limit and key not in self._seen:
            _remember(self._seen, key, None)  # the cache is full: build for this shape if it comes back
            return None
        self._seen.pop(key, None)
        self.builds += 1
        if self.background:
            self._building.add(key)
            threading.Thread(target=self._build_later, args=(key,), name="kiln-shape-build", daemon=True).start()
            return None
        return self._built(key)

    def _built(self, key: tuple) -> Any:
        """The static build for `key`, made now and kept (None where these shapes refuse one)."""
        try:
            static = self._build(key)
        except KilnError as e:  # AotError, or a pass or lowering that refuses these shapes
            static, why = None, str(e)
        self._keep(key, static, None if static is not None else why)
        return static

    def _build_later(self, key: tuple) -> None:
        """A background build: compiled outside the lock (runs go on meanwhile), kept under it. Any error
        refuses the shape: no caller is waiting to hear it, and the fallback serves these shapes."""
        try:
            static, why = self._build(key), None
        except Exception as e:  # noqa: BLE001
            static, why = None, f"{type(e).__name__}: {e}"
        with self._lock:
            self._keep(key, static, why)
            self._building.discard(key)

    def _keep(self, key: tuple, static: Any, why: str | None) -> None:
        """Hold a new build (the least recent one going past `limit`), or remember why there is none."""
        if static is None:
            _remember(self.refused, key, why or "no static build")
            return
        self.built[key] = static
        if len(self.built) > self.limit:
            self.built.popitem(last=False)


def _remember(d: OrderedDict, key: tuple, value: Any) -> None:
    d[key] = value
    if len(d) > MAX_REMEMBERED:
        d.popitem(last=False)


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    return None if shape is None else tuple(int(d) for d in shape)
