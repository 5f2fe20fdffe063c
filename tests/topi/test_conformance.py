"""ONNX node conformance cases through the te computes: import with kiln.from_onnx, lower main's
calls to te, evaluate with kiln.te.eval, compare with the expected outputs (onnx's tolerances).

Integer and one-element inputs are bound as Constants first (they decide shapes: axes, pads, repeats ...), as
FoldConstant leaves them in a real model. Cases whose calls have no compute are skipped.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.topi  # noqa: F401
from kiln.errors import KilnError
from kiln.ir.expr import Call, Constant, Function
from kiln.ir.visitor import post_order
from kiln.op.registry import OpDef
from kiln.te.eval import evaluate
from kiln.topi.lower import lower_function
from kiln.transform.basic import substitute
from tests.conformance.cases import assert_similar, data_sets, node_cases

# cases whose expectations the computes do not meet, with the reason
KNOWN = {
}


def _bind_ints(fn: Function, ins: list) -> tuple[Function, list]:
    """fn with its integer and one-element inputs replaced by Constants of the test data (they
    decide shapes); the remaining inputs."""
    mapping, params, rest = {}, [], []
    for p, v in zip(fn.params, ins):
        if isinstance(v, np.ndarray) and (v.dtype.kind in "iu" or v.size == 1):
            mapping[id(p)] = Constant(v)
        else:
            params.append(p)
            rest.append(v)
    return Function(params, substitute(fn.body, mapping), fn.attrs), rest


def _has_computes(fn: Function) -> bool:
    calls = [e for e in post_order(fn.body) if isinstance(e, Call)]
    return bool(calls) and all(isinstance(c.op, OpDef) and c.op.compute is not None for c in calls)


def run_case(name: str) -> str:
    """'pass', or 'skip: why'; raises AssertionError when the outputs differ."""
    tc = node_cases()[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mod = kiln.from_onnx(tc.model)
        except KilnError as e:
            return f"skip: import: {e}"
    if not _has_computes(mod.main):
        return "skip: no compute"
    for ins, refs in data_sets(tc):
        try:
            fn, rest = _bind_ints(mod.main, ins)
            low = lower_function(fn)
        except KilnError as e:
            return f"skip: {e}"
        feeds = dict(zip(low.params, rest)) | low.constants
        with np.errstate(all="ignore"):
            outs = evaluate(low.outputs, feeds)
        assert_similar(refs, outs, tc.rtol, tc.atol)
    return "pass"


def _names() -> list[str]:
    return sorted(n for n in node_cases() if "expanded" not in n)


@pytest.mark.slow
def test_node_cases_through_computes():
    results = {}
    for name in _names():
        try:
            results[name] = run_case(name)
        except Exception as e:  # noqa: BLE001 - collected and reported together
            results[name] = f"fail: {type(e).__name__}: {str(e)[:200]}"
    failed = {n: r for n, r in results.items() if r.startswith("fail") and n not in KNOWN}
    passed = sum(r == "pass" for r in results.values())
    print(f"\n{passed} node cases pass through te computes; {len(failed)} fail")
    assert not failed, "\n".join(f"{n}: {r}" for n, r in sorted(failed.items()))
