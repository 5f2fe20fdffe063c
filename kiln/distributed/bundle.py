"""A compiled model's directory as one value that Ray's object store can carry to any node.

The nodes of a real cluster share no disk, so a stage or replica is shipped as the bytes of the
directory `kiln compile` / `Model.export` writes (library, weights, graph) and unpacked on the worker's
node into a directory of its own. Names are checked on both sides: a bundle is data from the network
and never names a path outside the directory it is unpacked into.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kiln.errors import DistributedError

Bundle = dict[str, bytes]


def pack(directory: str | os.PathLike) -> Bundle:
    """Every file of the compiled model at `directory` by name (a compiled directory is flat)."""
    root = Path(directory)
    if not root.is_dir():
        raise DistributedError(f"{root} is not a compiled model directory")
    entries = sorted(root.iterdir())
    nested = [p.name for p in entries if not p.is_file()]
    if nested:
        raise DistributedError(f"{root} holds {nested}, which are not files: a compiled model directory is flat")
    return {p.name: p.read_bytes() for p in entries}


def unpack(bundle: Bundle, parent: str | os.PathLike | None = None) -> Path:
    """Write `bundle` into a new directory under `parent` (the system's temporary directory when None)
    and return it. The files go into a temporary sibling first, renamed into place when complete."""
    for name in bundle:
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise DistributedError(f"a model bundle names the file {name!r}, which is not a plain file name")
    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="kiln-bundle.tmp-", dir=base))
    try:
        for name, data in bundle.items():
            (tmp / name).write_bytes(data)
        dest = Path(tempfile.mkdtemp(prefix="kiln-bundle-", dir=base))
        dest.rmdir()
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
