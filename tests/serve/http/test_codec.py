"""The KServe tensor codec and request parameters, without a server: every datatype through binary and
JSON, BYTES framing, Triton's integer priorities and microsecond timeouts."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.errors import ServeError
from kiln.serve import tensor_codec
from kiln.serve.dispatch import Priority
from kiln.serve.protocol import parse_priority, parse_timeout

NUMERIC = [k for k in tensor_codec.KSERVE_TO_KILN if k != "BYTES"]


@pytest.mark.parametrize("datatype", NUMERIC)
def test_every_numeric_datatype_round_trips(datatype):
    from kiln.ir.dtype import to_numpy

    x = (np.arange(6) % 2).astype(to_numpy(tensor_codec.KSERVE_TO_KILN[datatype])).reshape(2, 3)
    assert tensor_codec.datatype_of(x) == datatype
    back = tensor_codec.from_binary("t", datatype, [2, 3], memoryview(tensor_codec.to_binary(x)))
    np.testing.assert_array_equal(back, x)
    assert back.dtype == x.dtype and back.flags.writeable
    np.testing.assert_array_equal(tensor_codec.from_json("t", datatype, [2, 3], tensor_codec.to_json(x)), x)


def test_bytes_round_trip():
    x = np.array(["a", "", "héllo"], dtype=object)
    raw = tensor_codec.to_binary(x)
    assert raw[:5] == b"\x01\x00\x00\x00a"
    assert list(tensor_codec.from_binary("t", "BYTES", [3], memoryview(raw))) == ["a", "", "héllo"]
    assert list(tensor_codec.from_json("t", "BYTES", [3], ["a", "", "héllo"])) == ["a", "", "héllo"]
    with pytest.raises(ServeError, match="t: BYTES data must be JSON strings"):
        tensor_codec.from_json("t", "BYTES", [1], [3])
    with pytest.raises(ServeError, match="after its 1 BYTES elements"):
        tensor_codec.from_binary("t", "BYTES", [1], memoryview(raw))


def test_a_dtype_the_protocol_lacks_is_named():
    assert tensor_codec.kserve_type("complex64") == "COMPLEX64"


@pytest.mark.parametrize(("value", "want"), [(None, None), (0, None), (1, Priority.RT), (2, Priority.BE),
                                              ("rt", Priority.RT), ("be", Priority.BE)])
def test_priorities(value, want):
    assert parse_priority(value) is want


@pytest.mark.parametrize("value", [-1, True, "high", 1.5])
def test_bad_priorities(value):
    with pytest.raises(ServeError, match="parameter priority"):
        parse_priority(value)


def test_timeouts():
    assert parse_timeout(None) is None and parse_timeout(0) is None and parse_timeout(2500) == 0.0025
    with pytest.raises(ServeError, match="microseconds"):
        parse_timeout(1.5)
