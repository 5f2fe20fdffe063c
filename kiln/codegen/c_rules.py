"""The C backend's spelling tables as one value, so a backend that differs in a few spellings (CUDA C,
a simulated accelerator) overrides only those entries and inherits the rest.

The printers (c_expr, c_stmt, intrinsics) look every rule up in the CRules they are given, never in a
module global; the tables themselves stay data, next to the rules they hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType

from kiln.codegen import c_expr, c_launch, c_stmt, intrinsics
from kiln.codegen.c_types import STORAGE_CTYPE
from kiln.target import Target
from kiln.tir import stmt as S


@dataclass(frozen=True)
class CRules:
    """How each tir node is spelled: leaf / scalar / vector-native expressions, statements, intrinsic
    calls by name, and the C type a dtype is stored as (buffer parameters, allocations, AOT arguments)."""

    leaf: Mapping[type, Callable]
    scalar: Mapping[type, Callable]
    vector_native: Mapping[type, tuple[str, Callable]]
    stmt: Mapping[type, Callable]
    intrinsic: Mapping[str, Callable]
    storage_ctype: Mapping[str, str]

    def extend(self, **tables: Mapping) -> CRules:
        """These rules with the given tables' entries added or replaced (the rest inherited)."""
        unknown = set(tables) - {f.name for f in fields(self)}
        if unknown:
            raise TypeError(f"CRules has no tables {sorted(unknown)}")
        return CRules(**{f.name: MappingProxyType({**getattr(self, f.name), **tables.get(f.name, {})})
                         for f in fields(self)})


C_RULES = CRules(
    leaf=MappingProxyType(c_expr.LEAF_RULES), scalar=MappingProxyType(c_expr.SCALAR_RULES),
    vector_native=MappingProxyType(c_expr.VECTOR_NATIVE), stmt=MappingProxyType(c_stmt.STMT_RULES),
    intrinsic=MappingProxyType(intrinsics.INTRINSIC_RULES), storage_ctype=MappingProxyType(STORAGE_CTYPE),
)
_WITH_LAUNCHES: dict[int, tuple[CRules, CRules]] = {}


def with_launches(rules: CRules) -> CRules:
    """`rules` with Kiln threading: parallel loops launch into Kiln's thread pool (kiln.codegen.c_launch),
    every other spelling `rules`' own. The same object for the same rules (renderings are cached by rules)."""
    hit = _WITH_LAUNCHES.get(id(rules))
    if hit is None or hit[0] is not rules:
        hit = _WITH_LAUNCHES[id(rules)] = (rules, rules.extend(stmt={S.For: c_launch.launching(rules.stmt[S.For])}))
    return hit[1]


POOL_RULES = with_launches(C_RULES)


def rules_for(target: Target, rules: CRules = C_RULES) -> CRules:
    """`rules` for `target`'s threading: OpenMP pragmas as they are, or launches into Kiln's pool."""
    return with_launches(rules) if target.threading == "kiln" else rules
