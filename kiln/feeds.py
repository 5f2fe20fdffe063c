"""Inputs for running a model without data: random feeds of the declared shapes, and symbolic dims fixed.

`kiln run`, `kiln bench` and `kiln tune` (and the scripts) share these; they live here, not in one of
the commands, so that the commands do not import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib import format as npformat

from kiln.errors import InputError
from kiln.ir import dtype as dt
from kiln.ir.sizes import check_alloc
from kiln.ir.types import SizeVar, TensorType


def random_feeds(mod, given: dict[str, np.ndarray], dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of the declared shapes for inputs not given; symbolic dims come from `dims`."""
    rng = np.random.default_rng(seed)
    feeds = dict(given)
    for p in mod.input_vars:
        if p.name in feeds:
            continue
        t = p.type
        if not isinstance(t, TensorType) or t.shape is None:
            raise InputError(f"input '{p.name}' has type {t}; give it with --input {p.name}=FILE.npy")
        shape = []
        for d in t.shape:
            if isinstance(d, SizeVar):
                if d.name not in dims:
                    raise InputError(f"input '{p.name}' has symbolic dim '{d.name}'; give its size with "
                                     f"--dim {d.name}=VALUE (or the input with --input)")
                shape.append(dims[d.name])
            else:
                shape.append(d)
        check_alloc(f"input '{p.name}'", shape, t.dtype)
        npdt = dt.to_numpy(t.dtype)
        if t.dtype == "bool":
            arr = rng.random(shape) < 0.5
        elif t.dtype == "string":
            arr = np.full(shape, "kiln", dtype=object)
        elif dt.is_float(t.dtype) or t.dtype.startswith("complex"):
            arr = rng.standard_normal(shape).astype(npdt)
        else:
            arr = rng.integers(0, 8, size=shape).astype(npdt)
        feeds[p.name] = arr
    return feeds


def load_npy(name: str, path: str) -> np.ndarray:
    """Input `name` from a .npy file; the size its header declares is checked before it is read."""
    try:
        with open(path, "rb") as f:
            version = npformat.read_magic(f)
            read_header = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
            shape, _, dtype = read_header(f)
        check_alloc(f"--input {name}={path}", shape, dtype)
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"--input {name}={path}: cannot read .npy file ({e})") from None


def symbolic_dims(model: Any) -> list[str]:
    """Names of the symbolic dims of the model's inputs, in order of first use."""
    names: list[str] = []
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param not in names:
                names.append(d.dim_param)
    return names


def with_fixed_dims(model: Any, dims: dict[str, int], say: Callable[[str], None], hint: str = "") -> Any:
    """The model with every symbolic input dim fixed: to its value in `dims`, else to 1 (said)."""
    from kiln.compiler.model_dims import fix_dims

    dims = dict(dims)
    for name in symbolic_dims(model):
        if name not in dims:
            dims[name] = 1
            say(f"symbolic dim {name} = 1 (set it with --dim {name}=VALUE{hint})")
    return fix_dims(model, dims)
