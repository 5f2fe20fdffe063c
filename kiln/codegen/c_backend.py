"""The C backend: tir -> C99 (gnu11) with OpenMP and GCC vector extensions, compiled by gcc through the
compile cache, loaded with ctypes.

How each tir node is spelled lives in the CRules tables (kiln.codegen.c_rules). A C-family backend
subclasses CBackend and sets `rules = C_RULES.extend(...)` with only the spellings that differ; a target
with -threading=kiln gets them with parallel loops launched into Kiln's pool (c_rules.with_launches).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kiln.codegen.aot_source import Copy, KernelCall, generate_aot, generate_dataflow
from kiln.codegen.backend import Backend
from kiln.codegen.c_rules import C_RULES, CRules, rules_for
from kiln.codegen.c_source import RUNTIME_HEADER, CSource, generate
from kiln.codegen.cache import CompileCache
from kiln.codegen.compiler import FLAGS
from kiln.codegen.module import CModule
from kiln.target import Target
from kiln.tir.stmt import PrimFunc


class CBackend(Backend):
    """Spells tir by `rules` after `runtime_header` (kiln_runtime.h: the helpers the rules call)."""

    kind = "c"
    runtime_header = RUNTIME_HEADER
    rules: CRules = C_RULES

    def rules_for(self, target: Target | None) -> CRules:
        """This backend's rules for `target`'s threading (default: the host's)."""
        return rules_for(target or Target.host(), self.rules)

    def render_kernels(self, funcs: Sequence[PrimFunc], target: Target | None = None) -> CSource:
        return generate(funcs, self.rules_for(target), self.runtime_header)

    def render_aot(self, funcs: Sequence[PrimFunc], calls: Sequence[KernelCall], copies: Sequence[Copy],
                   target: Target | None = None) -> CSource:
        target = target or Target.host()
        return generate_aot(funcs, calls, copies, self.rules_for(target), self.runtime_header,
                            preemptible=target.threading == "kiln")

    def render_dataflow(self, funcs: Sequence[PrimFunc], calls: Sequence[KernelCall], copies: Sequence[Copy],
                        target: Target | None = None) -> CSource:
        return generate_dataflow(funcs, calls, copies, self.rules_for(target), self.runtime_header)

    def compile(self, code: str, *, cache: CompileCache | None = None, cc: str = "gcc",
                flags: tuple[str, ...] = FLAGS) -> Path:
        """Compiled by `cc` with `flags` (kiln.codegen.compiler), or taken from `cache`."""
        return (cache or CompileCache()).build(code, cc, flags)

    def load(self, name: str, source: CSource, path: Path) -> CModule:
        return CModule(name, source, path)
