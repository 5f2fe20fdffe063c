"""serve_deployment: a Kiln model as a Ray Serve deployment, called through a handle (dict of arrays)
and over Ray Serve's HTTP proxy (the JSON form); answers equal the model's own run."""

from __future__ import annotations

import json
import shutil
import socket
import urllib.request

import numpy as np
import pytest

import kiln
from kiln.distributed import serve_deployment
from kiln.errors import DistributedError
from kiln.serve.repository import SERVE_TARGET
from tests.distributed.ray_cluster import local_cluster
from tests.serve.http.models import MLP_SIZES, tiny_mlp

pytestmark = pytest.mark.ray
ray_cluster = local_cluster(num_cpus=2)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the deployment tests need a compiled model")
    return kiln.build(tiny_mlp(), target=SERVE_TARGET).export(tmp_path_factory.mktemp("m") / "mlp")


@pytest.fixture(scope="module")
def serve_on(ray_cluster):
    """Ray Serve with its HTTP proxy on a free loopback port; skipped when Serve cannot start here."""
    serve = pytest.importorskip("ray.serve")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
    except Exception as e:  # noqa: BLE001 - any failure to start Serve on this machine is a skip reason
        pytest.skip(f"Ray Serve cannot start here: {type(e).__name__}: {e}")
    yield serve, port
    serve.shutdown()


def test_a_handle_and_http_answer_as_the_model_does(serve_on, compiled):
    serve, port = serve_on
    model = kiln.load(compiled).model
    handle = serve.run(serve_deployment(compiled, name="mlp"), name="mlp", route_prefix="/mlp")
    x = np.random.default_rng(0).standard_normal((2, MLP_SIZES[0])).astype(np.float32)
    expect = model.run({"input": x})[0]
    got = handle.remote({"input": x}).result(timeout_s=60)
    np.testing.assert_array_equal(got[model.outputs[0].name], expect)
    body = json.dumps({"inputs": {"input": x.tolist()}}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/mlp", body), timeout=60) as r:
        answer = json.loads(r.read())
    np.testing.assert_array_equal(np.asarray(answer["outputs"][model.outputs[0].name], np.float32), expect)


def test_bad_arguments_are_errors(ray_cluster, tmp_path):
    with pytest.raises(DistributedError, match="num_replicas=0"):
        serve_deployment(tmp_path, num_replicas=0)
    with pytest.raises(DistributedError, match="missing.onnx is not a file"):
        serve_deployment(tmp_path / "missing.onnx")
