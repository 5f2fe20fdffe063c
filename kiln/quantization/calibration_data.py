"""Calibration feeds: a directory of .npz / .npy files, or a count of random feeds.

Format: each file in the directory is one run of the model, read in sorted name order. An .npz file
holds one array per model input, keyed by the input's name; an .npy file holds the one input of a
single-input model. Arrays must have the input's declared dtype and static dims (symbolic dims may
take any size). Other files in the directory are ignored.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from kiln.errors import CalibrationError, InputError
from kiln.feeds import random_feeds
from kiln.ir.input_check import check_input
from kiln.ir.module import IRModule
from kiln.ir.types import SizeVar, TensorType

Feeds = dict[str, np.ndarray]
FEED_SUFFIXES = (".npz", ".npy")


def calibration_feeds(data: str | int | os.PathLike, mod: IRModule) -> list[tuple[str, Feeds]]:
    """(where each came from, feeds) for `data`: a directory of feed files, or a number of random feeds."""
    if isinstance(data, int) or (isinstance(data, str) and data.isdigit()):
        return random_calibration(int(data), mod)
    directory = os.fspath(data)
    if not os.path.isdir(directory):
        raise CalibrationError(f"calibration data {directory}: not a directory of .npz/.npy files, nor a number "
                               f"of random feeds")
    files = sorted(f for f in os.listdir(directory) if f.endswith(FEED_SUFFIXES))
    if not files:
        raise CalibrationError(f"calibration data {directory}: no .npz or .npy files in the directory")
    return [(path, read_feed_file(path, mod)) for path in (os.path.join(directory, f) for f in files)]


def random_calibration(count: int, mod: IRModule) -> list[tuple[str, Feeds]]:
    """`count` random feeds of the inputs' declared shapes (symbolic dims 1), with a warning."""
    if count < 1:
        raise CalibrationError(f"calibration data: {count} random feeds; give at least 1")
    warnings.warn(f"calibrating on {count} random feeds: ranges from real inputs give a far more accurate "
                  f"quantized model", stacklevel=3)
    dims = {d.name: 1 for p in mod.main.params if isinstance(p.type, TensorType) and p.type.shape
            for d in p.type.shape if isinstance(d, SizeVar)}
    return [(f"random feed {i}", random_feeds(mod, {}, dims, seed=i)) for i in range(count)]


def read_feed_file(path: str, mod: IRModule) -> Feeds:
    """One feed file's arrays, checked against the model's inputs; errors name the file and the input."""
    names = list(mod.input_names)
    try:
        arrays = _arrays(path, np.load(path, allow_pickle=False), names)
    except (OSError, ValueError) as e:
        raise CalibrationError(f"calibration file {path}: cannot read it ({e})") from None
    unknown = sorted(set(arrays) - set(names))
    if unknown:
        raise CalibrationError(f"calibration file {path}: input(s) {', '.join(unknown)} are not the model's; "
                               f"its inputs are {', '.join(names)}")
    missing = [n for n in names if n not in arrays]
    if missing:
        raise CalibrationError(f"calibration file {path}: no array for input(s) {', '.join(missing)}")
    dims: dict[str, int] = {}
    for p in mod.main.params:
        try:
            check_input(p.name, arrays[p.name], p.type, dims)
        except InputError as e:
            raise CalibrationError(f"calibration file {path}: {e}") from None
    return arrays


def _arrays(path: str, loaded: Any, names: list[str]) -> Feeds:
    if isinstance(loaded, np.ndarray):
        if len(names) != 1:
            raise CalibrationError(f"calibration file {path}: an .npy file holds one array, but the model has "
                                   f"inputs {', '.join(names)}; use an .npz file keyed by input name")
        return {names[0]: loaded}
    with loaded:
        return {key: loaded[key] for key in loaded.files}
