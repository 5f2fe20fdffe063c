"""A compiled model's weights on disk: one raw file of tensors, each on a 64-byte boundary, and an index.

The index (a list kept in model.json) gives each tensor's name, Kiln dtype, shape, offset, byte count
and crc32. Loading maps the file read-only and hands out numpy views of it: the kernels read the
weights in place (the offsets keep them on the boundary `kiln.ir.aligned` wants, so nothing copies
them), and every process that loads one artifact shares its pages through the page cache. No pickle.
"""

from __future__ import annotations

import math
import mmap
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import ArtifactError
from kiln.ir.aligned import ALIGN
from kiln.ir.dtype import from_numpy, to_numpy
from kiln.target import host_cores

_PAD = bytes(ALIGN)


def write_weights(path: Path, weights: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Write `weights` to `path` in order, each padded to the next 64-byte offset; their index."""
    index, offset = [], 0
    with open(path, "wb") as f:
        for name, a in weights.items():
            if a.dtype.hasobject:
                raise ArtifactError(f"weight {name} has dtype {a.dtype}; only numeric weights can be saved")
            data = memoryview(np.ascontiguousarray(a)).cast("B")
            f.write(data)
            index.append({"name": name, "dtype": from_numpy(a.dtype), "shape": list(a.shape), "offset": offset,
                          "nbytes": data.nbytes, "crc32": zlib.crc32(data)})
            offset += data.nbytes
            pad = -offset % ALIGN
            f.write(_PAD[:pad])
            offset += pad
        f.flush()
        os.fsync(f.fileno())
    return index


def read_weights(path: Path, index: list[dict[str, Any]], verify: bool = True) -> dict[str, np.ndarray]:
    """name -> read-only array over the mapped file. `verify`: check every tensor's crc32 (reads every
    page once; a bad tensor is an ArtifactError naming the file and the tensor)."""
    try:
        size = path.stat().st_size
        end = max((int(t["offset"]) + int(t["nbytes"]) for t in index), default=0)
    except FileNotFoundError:
        raise ArtifactError(f"{path.parent} is missing {path.name}") from None
    except OSError as e:
        raise ArtifactError(f"{path} cannot be read ({e})") from None
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{path}: its index in model.json is inconsistent ({type(e).__name__}: {e})") from None
    if size < end:
        raise ArtifactError(f"{path} is truncated: {size} bytes, its index needs {end}; export the model again")
    buf = _map(path) if size else b""
    arrays = {t["name"]: _tensor(path, buf, t) for t in index}
    if verify:
        _verify(path, buf, index)
    return arrays


def _verify(path: Path, buf: Any, index: list[dict[str, Any]]) -> None:
    """Each tensor's crc32 against the index, on every core: zlib releases the GIL over a large buffer, and
    this pass over the whole file is most of an AOT load (resnet50: 100 MB)."""
    view = memoryview(buf)
    spans = [(int(t["offset"]), int(t["nbytes"])) for t in index]
    with ThreadPoolExecutor(max(1, min(len(spans), host_cores()))) as pool:
        crcs = list(pool.map(lambda span: zlib.crc32(view[span[0]:span[0] + span[1]]), spans))
    for t, (offset, nbytes), crc in zip(index, spans, crcs):
        if crc != t.get("crc32"):
            raise ArtifactError(f"{path}: weight {t.get('name')!r} (bytes {offset}..{offset + nbytes}) is corrupt: "
                                "its crc32 does not match the index in model.json; export the model again")


def _map(path: Path) -> mmap.mmap:
    try:
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path} cannot be mapped ({e})") from None


def _tensor(path: Path, buf: Any, t: dict[str, Any]) -> np.ndarray:
    name = t.get("name")
    try:
        dtype, shape = to_numpy(t["dtype"]), tuple(int(d) for d in t["shape"])
        offset, nbytes = int(t["offset"]), int(t["nbytes"])
        count = math.prod(shape)
        if count * dtype.itemsize != nbytes or offset % ALIGN:
            raise ValueError(f"shape {list(shape)} {t['dtype']} is not {nbytes} bytes at a 64-byte offset")
        return np.frombuffer(buf, dtype, count, offset).reshape(shape)
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{path}: the index entry of weight {name!r} is inconsistent "
                            f"({type(e).__name__}: {e})") from None
