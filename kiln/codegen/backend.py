"""The seam between lowering and a machine: a code-generation backend renders tir into source, compiles
the source into a library (through the content-addressed compile cache) and loads the library.

A backend is one module implementing `Backend` (kiln.codegen.c_backend is the C one); the registry
(kiln.codegen.backends) finds it by target kind, so a CUDA C or simulated-accelerator backend plugs in
beside it without the driver or the runtime knowing which one runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from kiln.codegen.aot_source import Copy, KernelCall
from kiln.codegen.c_source import CSource
from kiln.codegen.cache import CompileCache
from kiln.target import Target
from kiln.tir.stmt import PrimFunc


class Library(Protocol):
    """A loaded library (the C backend's: CModule)."""

    path: Path  # the compiled file (in the compile cache)

    def get_function(self, name: str) -> Callable[..., Any]:
        """The kernel rendered from the PrimFunc called `name`."""


class Backend(ABC):
    """What the compiler needs of a backend. `kind` is the target kind it serves ("c");
    `runtime_header` is the header every source it renders begins with."""

    kind: str
    runtime_header: Path

    @abstractmethod
    def render_kernels(self, funcs: Sequence[PrimFunc], target: Target | None = None) -> CSource:
        """One module holding each of `funcs` behind the uniform kernel ABI (kiln_runtime.h), for `target`
        (default: the host; its threading decides how parallel loops are spelled)."""

    @abstractmethod
    def render_aot(self, funcs: Sequence[PrimFunc], calls: Sequence[KernelCall], copies: Sequence[Copy],
                   target: Target | None = None) -> CSource:
        """The kernels of `funcs` and one entry that runs `calls` in order, then `copies`."""

    @abstractmethod
    def compile(self, code: str, *, cache: CompileCache | None = None, **options: Any) -> Path:
        """The library built from `code` (the cached one when it was built before)."""

    @abstractmethod
    def load(self, name: str, source: CSource, path: Path) -> Library:
        """The library at `path`, built from `source`, with its kernels callable by PrimFunc name."""
