"""The unmodified tritonclient.http client against the `kiln serve --ray` front end (uvicorn in this
process, every run on Ray replicas): answers equal the model's own run, the config shows the replica
count, and readiness goes down when the replicas are gone."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest

import kiln
from kiln.distributed.replica_dispatcher import RayDispatcher
from kiln.serve.repository import SERVE_TARGET
from tests.distributed.ray_cluster import local_cluster
from tests.serve.http.models import MLP_SIZES, tiny_mlp
from tests.serve.http.running_server import RunningServer

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.ray
ray_cluster = local_cluster(num_cpus=2)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the serving tests need compiled models")
    root = tmp_path_factory.mktemp("repo")
    kiln.build(tiny_mlp(), target=SERVE_TARGET).export(root / "mlp")
    (root / "mlp" / "config.json").write_text(json.dumps({"replicas": 2, "priority": "rt"}))
    return root


@pytest.fixture(scope="module")
def server(ray_cluster, repo):
    running = RunningServer(repo, RayDispatcher())
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(url=server.url)
    yield c
    c.close()


@pytest.mark.parametrize("binary", [False, True])
def test_infer_over_ray_equals_the_model_run(client, repo, binary):
    model = kiln.load(repo / "mlp").model
    x = np.random.default_rng(0).standard_normal((2, MLP_SIZES[0])).astype(np.float32)
    tensor = httpclient.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    name = model.outputs[0].name
    for _ in range(4):  # both replicas answer
        result = client.infer("mlp", [tensor], outputs=[httpclient.InferRequestedOutput(name, binary_data=binary)])
        np.testing.assert_array_equal(result.as_numpy(name), model.run({"input": x})[0])


def test_health_and_config_show_the_replicas(client):
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("mlp")
    assert client.get_model_config("mlp")["kiln"]["replicas"] == 2


def test_ready_goes_down_when_every_replica_is_gone(ray_cluster, server, client):
    replicas = server.dispatcher.replicas("mlp")
    for i in range(replicas.replicas):
        ray_cluster.kill(replicas.actor(i), no_restart=True)
        with pytest.raises(ray_cluster.exceptions.RayActorError):  # a kill takes effect a moment later
            for _ in range(100):
                ray_cluster.get(replicas.actor(i).info.remote())
                time.sleep(0.05)
    x = np.zeros((2, MLP_SIZES[0]), np.float32)
    tensor = httpclient.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException, match="DistributedError: 'mlp': a request failed"):
        client.infer("mlp", [tensor])
    assert not client.is_model_ready("mlp") and not client.is_server_ready()
    deadline = time.monotonic() + 30
    while not replicas.dead():  # the probes find both out of restarts
        assert time.monotonic() < deadline, "the replicas were never found dead"
        time.sleep(0.05)
    with pytest.raises(InferenceServerException, match="every replica of 'mlp' is dead"):
        client.infer("mlp", [tensor])  # failed at once, not queued for ever
