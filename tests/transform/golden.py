"""Golden-test helper: run a pass on Before text and compare structurally with Expected text."""

from __future__ import annotations

import kiln
from kiln.ir.module import IRModule
from kiln.transform import Pass, PassContext, WellFormedCheck


def run_pass(p: Pass, mod: IRModule, **ctx_kw) -> IRModule:
    ctx_kw.setdefault("opt_level", 3)
    with PassContext(instruments=[WellFormedCheck()], **ctx_kw) as ctx:
        return p(mod, ctx)


def assert_golden(p: Pass, before: str, expected: str, **ctx_kw) -> IRModule:
    out = run_pass(p, kiln.ir.parse(before), **ctx_kw)
    want = kiln.ir.parse(expected)
    assert kiln.ir.structural_equal(out, want), (
        f"{p.name} produced:\n{kiln.ir.text(out)}\nexpected:\n{kiln.ir.text(want)}")
    return out
