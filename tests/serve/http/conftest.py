"""Fixtures of the serving tests: compiled tiny models (built once per session), a repository of them,
and a front end serving it over the ThreadDispatcher test double."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import kiln
from kiln.serve.repository import SERVE_TARGET
from tests.serve.http.models import every_dtype, tiny_mlp
from tests.serve.http.running_server import RunningServer
from tests.serve.http.thread_dispatcher import ThreadDispatcher


@pytest.fixture(scope="session")
def compiled(tmp_path_factory) -> dict[str, Path]:
    """Compiled directories of the tiny models, by name."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the serving tests need compiled models")
    root = tmp_path_factory.mktemp("compiled")
    out = {}
    for name, onnx_model in (("mlp", tiny_mlp()), ("dtypes", every_dtype())):
        out[name] = kiln.build(onnx_model, target=SERVE_TARGET).export(root / name)
    return out


@pytest.fixture(scope="session")
def repo(tmp_path_factory, compiled) -> Path:
    """mlp (version 3 of two, queue limit 4) and dtypes, both compiled directories."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(compiled["mlp"], root / "mlp" / "1")
    shutil.copytree(compiled["mlp"], root / "mlp" / "3")
    (root / "mlp" / "config.json").write_text(json.dumps({"queue_limit": 4, "priority": "rt"}))
    shutil.copytree(compiled["dtypes"], root / "dtypes")
    return root


@pytest.fixture(scope="module")
def server(repo):
    running = RunningServer(repo, ThreadDispatcher())
    yield running
    running.stop()


@pytest.fixture(scope="session")
def mlp_model(compiled):
    return kiln.load(compiled["mlp"]).model
