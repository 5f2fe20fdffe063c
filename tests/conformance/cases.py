"""The ONNX node conformance cases, generated offline, and onnx's runner comparison rules."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper


def _normalize(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, onnx.SequenceProto):
        return [_normalize(x) for x in numpy_helper.to_list(v)]
    if isinstance(v, onnx.OptionalProto):
        return _normalize(numpy_helper.to_optional(v))
    if isinstance(v, list):
        return [_normalize(x) for x in v]
    if isinstance(v, np.generic):
        return np.asarray(v)
    return v


@functools.lru_cache(maxsize=1)
def node_cases() -> dict[str, Any]:
    """name -> onnx TestCase (1884 with onnx 1.23)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {tc.name: tc for tc in collect_testcases(None)}


def data_sets(tc) -> list[tuple[list, list]]:
    return [([_normalize(x) for x in ins], [_normalize(x) for x in outs]) for ins, outs in tc.data_sets]


def assert_similar(refs: list, outs: list, rtol: float, atol: float) -> None:
    """onnx's Runner rules: same count, exact shapes and dtypes, allclose values (NaN == NaN)."""
    assert len(outs) == len(refs), f"got {len(outs)} outputs, expected {len(refs)}"
    for i, (r, o) in enumerate(zip(refs, outs)):
        _similar(r, o, rtol, atol, f"output {i}")


def _similar(ref: Any, out: Any, rtol: float, atol: float, where: str) -> None:
    if ref is None:
        assert out is None, f"{where}: expected an empty optional, got {type(out).__name__}"
        return
    if isinstance(ref, (list, tuple)):
        assert isinstance(out, (list, tuple)), f"{where}: expected a sequence, got {type(out).__name__}"
        assert len(out) == len(ref), f"{where}: sequence length {len(out)}, expected {len(ref)}"
        for j, (r, o) in enumerate(zip(ref, out)):
            _similar(r, o, rtol, atol, f"{where}[{j}]")
        return
    out = np.asarray(out) if isinstance(out, np.generic) else out
    assert isinstance(out, np.ndarray), f"{where}: expected an ndarray, got {type(out).__name__}"
    ref = np.asarray(ref)
    assert out.shape == ref.shape, f"{where}: shape {out.shape}, expected {ref.shape}"
    if ref.dtype == object:
        np.testing.assert_array_equal(out, ref, err_msg=where)
        return
    assert out.dtype == ref.dtype, f"{where}: dtype {out.dtype}, expected {ref.dtype}"
    if out.dtype.name == "bfloat16":
        rtol = max(rtol, 2 ** -6)
    try:
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, err_msg=where)
    except TypeError:
        np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=rtol, atol=atol,
                                   err_msg=where)
