"""An ONNX file read with its main graph's weights left in the file (issue 35: weights held once).

Parsed whole, a model holds every initializer's bytes in the protobuf while the importer makes its own arrays
of them: two copies of the weights at the import's peak. Here the file is mapped and walked in protobuf's
wire format (ModelProto.graph = field 7, GraphProto.initializer = 5, TensorProto.data_type = 2, name = 8,
raw_data = 9, data_location = 14); the model is parsed from a copy whose raw_data fields are empty, and each
weight is read from its place in the file straight into the 64-byte-aligned array the IR keeps (which checks
its byte count: the ONNX checker reads a copy in which those tensors have no elements).
Tensors whose bytes are not numpy's layout (strings, bfloat16, float8, 4-bit), external data and typed
fields (float_data ...) stay in the proto and are read as before.
"""

from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx.checker import ValidationError
from onnx.external_data_helper import load_external_data_for_model

from kiln.errors import ModelLoadError
from kiln.ir.aligned import aligned_empty

# ONNX data types whose raw_data is the numpy array's own bytes (little-endian, one bool a byte)
_PLAIN = {t: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)) for t in (
    onnx.TensorProto.FLOAT, onnx.TensorProto.UINT8, onnx.TensorProto.INT8, onnx.TensorProto.UINT16,
    onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.BOOL,
    onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64)}
_GRAPH, _INITIALIZER, _DATA_TYPE, _NAME, _RAW_DATA, _DATA_LOCATION = 7, 5, 2, 8, 9, 14
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True)
class FileWeights:
    """The main graph's initializers left in `path`: name -> (byte offset, byte count) of their raw_data."""

    path: str
    spans: dict[str, tuple[int, int]]

    def read(self, t: onnx.TensorProto) -> np.ndarray:
        """The tensor `t` (its raw_data left empty in the proto) read from the file into an aligned, read-only array."""
        offset, nbytes = self.spans[t.name]
        dtype, dims = _PLAIN[t.data_type], tuple(t.dims)
        if int(np.prod(dims, dtype=np.int64)) * dtype.itemsize != nbytes:
            raise ModelLoadError(f"tensor '{t.name}' (dims {list(dims)}, data_type {t.data_type}) cannot be read: "
                                 f"its raw_data holds {nbytes} bytes")
        buf = aligned_empty(nbytes, np.uint8)
        with open(self.path, "rb") as f:
            f.seek(offset)
            if f.readinto(buf) != nbytes:
                raise ModelLoadError(f"{self.path}: tensor '{t.name}' is cut short; the file may be truncated")
        arr = buf.view(dtype).reshape(dims)
        arr.flags.writeable = False  # the IR keeps it as it is (a writable array would be copied)
        return arr


def parse_leaving_weights(path: str) -> tuple[onnx.ModelProto, FileWeights] | None:
    """The model at `path` with its main graph's plain raw_data empty, and where those bytes are; None when the
    file does not walk as expected (the caller parses it whole, and reports what is wrong with it)."""
    if sys.byteorder != "little":  # raw_data is little-endian: here it is numpy's layout only on such a machine
        return None
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            view = memoryview(buf)
            try:
                spans: dict[str, tuple[int, int]] = {}
                stripped = _model(view, spans)
                model = onnx.load_from_string(stripped)
                load_external_data_for_model(model, os.path.dirname(path))  # as onnx.load does
            except (ValueError, IndexError, UnicodeDecodeError, DecodeError, ValidationError):
                return None  # e.g. external data named outside the model's directory: onnx.load says so
            finally:
                view.release()
    return model, FileWeights(path, spans)


def for_checker(model: onnx.ModelProto, weights: FileWeights) -> onnx.ModelProto:
    """A copy of `model` for the ONNX checker: each weight left in the file has dims [0], so the checker asks
    no bytes of it (FileWeights.read checks their count against the real dims)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for t in copy.graph.initializer:
        if t.name in weights.spans:
            del t.dims[:]
            t.dims.append(0)
    return copy


def _model(buf: memoryview, spans: dict[str, tuple[int, int]]) -> bytes:
    out = bytearray()
    for field, wire, start, vstart, end in _fields(buf, 0, len(buf)):
        if field == _GRAPH and wire == _LENGTH:
            out += _length_field(field, _graph(buf, vstart, end, spans))
        else:
            out += buf[start:end]
    return bytes(out)


def _graph(buf: memoryview, start: int, end: int, spans: dict[str, tuple[int, int]]) -> bytes:
    out = bytearray()
    for field, wire, fstart, vstart, fend in _fields(buf, start, end):
        if field == _INITIALIZER and wire == _LENGTH:
            out += _length_field(field, _tensor(buf, vstart, fend, spans))
        else:
            out += buf[fstart:fend]
    return bytes(out)


def _tensor(buf: memoryview, start: int, end: int, spans: dict[str, tuple[int, int]]) -> bytes:
    """The tensor's bytes with an empty raw_data when it is plain and embedded (its span recorded), else unchanged."""
    parts = list(_fields(buf, start, end))
    values = {f: (vs, fe) for f, _, _, vs, fe in parts}
    data_type = _varint(buf, values[_DATA_TYPE][0])[0] if _DATA_TYPE in values else 0
    external = _DATA_LOCATION in values and _varint(buf, values[_DATA_LOCATION][0])[0] != 0
    if data_type not in _PLAIN or external or _RAW_DATA not in values or _NAME not in values:
        return bytes(buf[start:end])
    name = bytes(buf[values[_NAME][0]:values[_NAME][1]]).decode("utf-8")
    if name in spans:  # a duplicate name: the checker's business, so the proto keeps it whole
        return bytes(buf[start:end])
    raw = values[_RAW_DATA]
    spans[name] = (raw[0], raw[1] - raw[0])
    return b"".join(_length_field(f, b"") if f == _RAW_DATA else bytes(buf[s:e]) for f, _, s, _, e in parts)


def _fields(buf: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, value start, field end) of each field in buf[start:end]."""
    pos = start
    while pos < end:
        tag, vpos = _varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            fend = _varint(buf, vpos)[1]
        elif wire == _LENGTH:
            n, vpos = _varint(buf, vpos)
            fend = vpos + n
        elif wire in (_FIXED64, _FIXED32):
            fend = vpos + (8 if wire == _FIXED64 else 4)
        else:
            raise ValueError(f"wire type {wire} at byte {pos}")
        if fend > end:
            raise ValueError(f"field {field} at byte {pos} runs past its message")
        yield field, wire, pos, vpos, fend
        pos = fend


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError(f"a varint longer than 10 bytes at byte {pos}")


def _length_field(field: int, value: bytes) -> bytes:
    return _encode_varint(field << 3 | _LENGTH) + _encode_varint(len(value)) + value


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
