"""A model repository: one directory whose entries are the models `kiln serve` offers.

An entry is `NAME.onnx`, or a directory `NAME/` holding a compiled Kiln directory (what `kiln
compile` writes) or `model.onnx`, either directly or in Triton-style numeric version directories
(`NAME/1/`, `NAME/2/`: the highest is served). Its settings come from `NAME.json` beside it or
`NAME/config.json`. Names reach the file system from URLs (the repository API), so every name is
checked against one pattern before any path is made from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kiln.errors import RepositoryError, UnknownModelError
from kiln.serve.dispatch import ModelConfig
from kiln.serve.model_config_file import read_config

if TYPE_CHECKING:
    from kiln.runtime.model import Model

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
COMPILED_MARK = "model.json"  # kiln.runtime.artifact's graph file: a directory holding it is a compiled model
ONNX_FILE = "model.onnx"
CONFIG_FILE = "config.json"
SERVE_TARGET = "c -threading=kiln"  # this machine, kernels on Kiln's pool: runs can be preempted


@dataclass(frozen=True)
class ModelSource:
    """Where a served model comes from: the file or directory to load, its version, its settings."""

    name: str
    path: Path  # an .onnx file or a compiled Kiln directory
    version: str
    config: ModelConfig

    @property
    def compiled(self) -> bool:
        return self.path.is_dir()


def check_name(name: str) -> str:
    """`name` when it can name a model; a RepositoryError otherwise (no separators, no '..', no hidden files)."""
    if not NAME.fullmatch(name) or name.endswith(".onnx") or name.endswith(".json"):
        raise RepositoryError(f"'{name}' is not a valid model name: letters, digits, '_', '.', '-', at most 128, "
                              "not starting with '.' and not ending in .onnx or .json")
    return name


class Repository:
    """The models of one directory, read from disk each time they are asked for (so that a model
    added or changed while the server runs is found by the repository API's load)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise RepositoryError(f"model repository {self.root} is not a directory")

    def names(self) -> list[str]:
        """Every entry that looks like a model (an .onnx file or a directory with a valid name)."""
        found = set()
        for entry in self.root.iterdir():
            name = entry.stem if entry.is_file() and entry.suffix == ".onnx" else entry.name if entry.is_dir() else None
            if name is not None and NAME.fullmatch(name):
                found.add(name)
        return sorted(found)

    def find(self, name: str) -> ModelSource:
        """The source of model `name`; UnknownModelError when the repository has none, RepositoryError when
        its entry cannot be served (no model file in it, a bad config)."""
        check_name(name)
        file, folder = self.root / f"{name}.onnx", self.root / name
        if file.is_file():
            return ModelSource(name, file, "1", self._config(self.root / f"{name}.json"))
        if not folder.is_dir():
            raise UnknownModelError(f"model '{name}' is not in the repository {self.root}")
        config = self._config(folder / CONFIG_FILE, self.root / f"{name}.json")
        version, where = _latest_version(folder)
        return ModelSource(name, _model_path(where, name), version, config)

    def _config(self, *candidates: Path) -> ModelConfig:
        present = [p for p in candidates if p.is_file()]
        if len(present) > 1:
            raise RepositoryError(f"model config: both {present[0]} and {present[1]} exist; keep one")
        return read_config(present[0]) if present else ModelConfig()


def _latest_version(folder: Path) -> tuple[str, Path]:
    """(version, directory) of the highest numeric version directory, else ("1", the folder itself)."""
    versions = [d for d in folder.iterdir() if d.is_dir() and d.name.isdigit()]
    if not versions:
        return "1", folder
    best = max(versions, key=lambda d: int(d.name))
    return str(int(best.name)), best


def _model_path(where: Path, name: str) -> Path:
    if (where / COMPILED_MARK).is_file():
        return where
    if (where / ONNX_FILE).is_file():
        return where / ONNX_FILE
    raise RepositoryError(f"model '{name}': {where} holds neither a compiled Kiln model ({COMPILED_MARK}) "
                          f"nor {ONNX_FILE}")


def load_model(source: ModelSource) -> Model:
    """The model ready to run: a compiled directory loaded as it is, an ONNX file compiled for this machine
    with Kiln's pool threading (minutes for a big model: the server calls this off its event loop)."""
    if source.compiled:
        from kiln.session import load

        return load(source.path).model
    from kiln.compiler import build

    return build(str(source.path), target=SERVE_TARGET)
