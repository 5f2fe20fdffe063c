"""Every ONNX node conformance case through kiln.onnx_backend, with onnx's tolerances.

Expected failures live in expected_failures.txt beside this file, one `name: reason` a line. The
test fails when an unlisted case fails, and (strict xfail) when a listed case passes.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.conformance.cases import assert_similar, data_sets, node_cases

HERE = os.path.dirname(__file__)


def read_reasons(filename: str) -> dict[str, str]:
    """`name: reason` lines of a file beside this one (blank lines and # comments skipped)."""
    out = {}
    with open(os.path.join(HERE, filename)) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(":")
                out[name.strip()] = reason.strip()
    return out


def expected_failures() -> dict[str, str]:
    return read_reasons("expected_failures.txt")


XFAIL = expected_failures()


def xfail_mark(reason: str) -> pytest.MarkDecorator:
    """Strict, except for unseeded random cases, which may pass by chance."""
    return pytest.mark.xfail(reason=reason, strict=not reason.startswith("random:"))


def _params():
    for name in sorted(node_cases()):
        marks = [xfail_mark(XFAIL[name])] if name in XFAIL else []
        yield pytest.param(name, marks=marks, id=name)


def run_case(name: str) -> None:
    import kiln.onnx_backend as backend

    tc = node_cases()[name]
    rep = backend.prepare(tc.model, "CPU", executor="interpreter")
    for ins, refs in data_sets(tc):
        with np.errstate(all="ignore"):
            outs = rep.run(ins)
        assert_similar(refs, list(outs), tc.rtol, tc.atol)


@pytest.mark.conformance
@pytest.mark.parametrize("name", _params())
def test_node_case(name: str) -> None:
    run_case(name)


def test_expected_failures_name_real_cases() -> None:
    unknown = sorted(set(XFAIL) - set(node_cases()))
    assert not unknown, f"expected_failures.txt names cases that do not exist: {unknown[:10]}"
