"""A local Ray cluster for one test module, and the small compiled models the replica tests serve."""

from __future__ import annotations

import shutil

import pytest

import kiln
from kiln.serve.repository import SERVE_TARGET
from tests.helpers import matmul_chain
from tests.serve.http.models import tiny_mlp


def local_cluster(num_cpus: int = 2):
    """A module-scoped fixture: a new local Ray cluster of `num_cpus` CPUs (never one already running on
    this machine: address "local"), shut down after the module; the module is skipped without Ray."""
    @pytest.fixture(scope="module")
    def ray_cluster():
        ray = pytest.importorskip("ray")
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        yield ray
        ray.shutdown()
    return ray_cluster


def compiled_models(tmp_path_factory) -> dict:
    """{"mlp": tiny MLP, "slow": a matmul chain of tens of ms a run on one core}, built for serving."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the replica tests need compiled models")
    return {"mlp": kiln.build(tiny_mlp(), target=SERVE_TARGET),
            "slow": kiln.build(matmul_chain(), target=SERVE_TARGET)}
