"""A pipeline on a simulated two-node Ray cluster (ray.cluster_utils): SPREAD places its stages on both nodes."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.distributed import Pipeline
from kiln.models import mlp

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=True,
                      head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_spread_places_each_stage_on_its_own_node(two_nodes):
    model = mlp(batch=1, sizes=(16, 32, 32, 4))
    x = np.random.default_rng(3).standard_normal((1, 16)).astype(np.float32)
    with Pipeline(model, stages=2, threads_per_stage=1, strategy="SPREAD") as pipe:
        assert len({p["node"] for p in pipe.placement}) == 2
        np.testing.assert_array_equal(pipe.run(None, {"input": x})[0], kiln.build(model).run({"input": x})[0])
