"""The ONNX node conformance cases through the compiled executor (fused groups as C kernels).

A case is expected to fail here if the interpreter's suite expects it to (expected_failures.txt)
or if compiled_expected_failures.txt lists it (`name: reason`); both are strict. The full sweep is
slow (one gcc run per case); the fast suite samples every SAMPLE-th case. Run this file as a
script for the sweep's summary: pass rate and how many cases ran any fused group on the host.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from tests.conformance.cases import assert_similar, data_sets, node_cases
from tests.conformance.test_node_cases import expected_failures, read_reasons, xfail_mark

SAMPLE = 10


def compiled_expected_failures() -> dict[str, str]:
    return read_reasons("compiled_expected_failures.txt")


XFAIL = {**expected_failures(), **compiled_expected_failures()}


@pytest.fixture(scope="module", autouse=True)
def _private_compile_cache(tmp_path_factory):
    """Compile into a cache of this test session, never the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KILN_CACHE_DIR", str(tmp_path_factory.mktemp("kiln-cache")))
        yield


def run_case(name: str) -> list[str]:
    """Build the case's model with the compiled executor, check every data set; returns why each group
    that ran on the host (no kernel ahead of time, none specialized at run time) did so."""
    from kiln.compiler.lower import build_graph_executor as build
    from kiln.frontend.onnx import from_onnx

    tc = node_cases()[name]
    mod = from_onnx(tc.model)
    cm = build(mod)
    for ins, refs in data_sets(tc):
        feeds = dict(zip(mod.input_names, ins))
        with np.errstate(all="ignore"):
            outs = [np.asarray(o) if isinstance(o, np.generic) else o for o in cm.run(feeds)]
        assert_similar(refs, outs, tc.rtol, tc.atol)
    return list(cm.ran_on_host.values())


def _params(every: int) -> list:
    return [pytest.param(name, marks=[xfail_mark(XFAIL[name])] if name in XFAIL else [],
                         id=name) for name in sorted(node_cases())[::every]]


@pytest.mark.parametrize("name", _params(SAMPLE))
def test_compiled_case_sampled(name: str) -> None:
    run_case(name)


@pytest.mark.slow
@pytest.mark.conformance
@pytest.mark.parametrize("name", _params(1))
def test_compiled_case(name: str) -> None:
    run_case(name)


def test_compiled_expected_failures_name_real_cases() -> None:
    listed = compiled_expected_failures()
    unknown = sorted(set(listed) - set(node_cases()))
    assert not unknown, f"compiled_expected_failures.txt names cases that do not exist: {unknown[:10]}"
    both = sorted(set(listed) & set(expected_failures()))
    assert not both, f"already expected to fail by expected_failures.txt: {both[:10]}"


# operator families the issue lets run on the host (strings, sequences, optionals), and the control
# flow ops whose bodies are compiled groups while the executor itself steps through them
HOST_ALLOWED = re.compile(r"\b(string|seq|optional)\.[a-z_]+|on string tensors|\bcontrol\.(loop|scan)\b.*outside any fused group"
                          r"|\bseq\.map\b.*outside any fused group")
OP_NAME = re.compile(r"\b[a-z]+\.[a-z_0-9]+\b")


def numeric_on_host(reasons: list[str]) -> list[str]:
    """The host reasons that name a numeric operator (not a string/sequence/optional one, not control flow)."""
    out = []
    for r in reasons:
        ops = [m for m in OP_NAME.findall(r) if not m.startswith(("fused_", "group"))]
        allowed = HOST_ALLOWED.search(r) is not None or "only tensors of known rank" in r
        if not allowed and not (ops and all(HOST_ALLOWED.search(o) for o in ops)):
            out.append(r)
    return out


def test_numeric_on_host_keeps_only_numeric_reasons() -> None:
    reasons = ["group0_s0: seq.split_to_sequence (node 's'): seq.split_to_sequence has no te compute",
               "control.loop (node 'L') runs outside any fused group (in the interpreter)",
               "a group of string.concat: no kernel ahead of time, no small inputs to specialize on",
               "a group of math.equal on string tensors: no kernel ahead of time, no small inputs to specialize on",
               "nn.flex_attention (node 'F') runs outside any fused group (in the interpreter)",
               "group0_s0: signal.dft (node 'D'): signal.dft: the complex inverse DFT runs on the host"]
    assert numeric_on_host(reasons) == reasons[4:]


def sweep(names: list[str]) -> None:
    """Print the pass rate, the cases that ran any group on the host, and how many passed with every
    numeric operator compiled."""
    passed, failed, host, numeric = 0, [], [], []
    for name in names:
        try:
            groups = run_case(name)
        except Exception as err:  # a sweep reports every failure and goes on
            failed.append(f"{name}: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}")
            continue
        passed += 1
        if groups:
            host.append(f"{name}: {groups[0][:200]}")
        bad = numeric_on_host(groups)
        if bad:
            numeric.append(f"{name}: {bad[0][:200]}")
    print("\n".join(["FAILED"] + failed + ["HOST"] + host + ["NUMERIC ON HOST"] + numeric))
    n = max(len(names), 1)
    print(f"{passed}/{len(names)} passed ({100 * passed / n:.1f}%), {len(host)} passing cases ran a group on the "
          f"host; {passed - len(numeric)}/{len(names)} ({100 * (passed - len(numeric)) / n:.1f}%) passed with every "
          f"numeric operator compiled")


if __name__ == "__main__":
    all_names = sorted(node_cases())
    sweep(all_names[int(sys.argv[1])::int(sys.argv[2])] if len(sys.argv) > 2 else all_names)
