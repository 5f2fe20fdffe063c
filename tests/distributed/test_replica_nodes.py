"""Replicas on a simulated two-node cluster (ray.cluster_utils): spread over both nodes, and a replica
whose node is removed is retried elsewhere with no request lost."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.distributed.replica_set import ReplicaSet
from tests.distributed.ray_cluster import compiled_models

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def two_nodes():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    yield ray, cluster, worker
    ray.shutdown()
    cluster.shutdown()


def test_replicas_spread_over_nodes_and_survive_a_node_lost(two_nodes, tmp_path_factory):
    ray, cluster, worker = two_nodes
    model = compiled_models(tmp_path_factory)["mlp"]
    replicas = ReplicaSet(model, replicas=2, max_restarts=0, name="mlp")
    try:
        assert len(set(replicas.nodes())) == 2
        x = np.random.default_rng(0).standard_normal(model.inputs[0].shape).astype(np.float32)
        expect = model.run({"input": x})[0]
        futures = [replicas.submit({"input": x}) for _ in range(200)]
        cluster.remove_node(worker)
        for f in futures:
            np.testing.assert_array_equal(f.result(timeout=120)[model.outputs[0].name], expect)
        assert replicas.up() == 1
    finally:
        replicas.close()
