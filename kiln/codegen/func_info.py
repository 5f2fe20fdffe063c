"""What a rendered C module holds (its code, and where each PrimFunc ended up in it): all a loader
(kiln.codegen.module) needs, kept apart from the generator (kiln.codegen.c_source) so that running
a compiled model does not import the generator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiln.tir.stmt import PrimFunc


@dataclass(frozen=True)
class FuncInfo:
    """Where a PrimFunc ended up in the module."""

    func: PrimFunc
    symbol: str  # the exported uniform-ABI entry
    body_symbol: str  # the typed body (KILN_BODY linkage)


@dataclass(frozen=True)
class CSource:
    code: str
    functions: dict[str, FuncInfo]  # by PrimFunc name
