"""The code-generation backends by target kind (kiln.Target's `kind`), and the one call that renders,
compiles and loads a kernel library through whichever backend a target names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.codegen.backend import Backend, Library
from kiln.codegen.c_backend import CBackend
from kiln.errors import CodegenError
from kiln.target import Target
from kiln.tir.stmt import PrimFunc

BACKENDS: dict[str, Backend] = {"c": CBackend()}


def get_backend(kind: str) -> Backend:
    """The backend for target kind `kind`; an unknown kind is the user's error, named with the known ones."""
    backend = BACKENDS.get(kind)
    if backend is None:
        raise CodegenError(f"no code-generation backend for target kind {kind!r}; known kinds: {sorted(BACKENDS)}")
    return backend


def build_library(funcs: Sequence[PrimFunc], name: str = "module", *, kind: str = "c", target: Target | None = None,
                  **options: Any) -> Library:
    """Render `funcs` as one kernel library for `target` (default: the host), compile it (or take it from
    the compile cache: `cache=`) and load it. `options` go to the backend's `compile` (the C backend's:
    cache, cc, flags)."""
    backend = get_backend(kind)
    source = backend.render_kernels(funcs, target)
    return backend.load(name, source, backend.compile(source.code, **options))
