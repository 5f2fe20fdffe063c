"""The unmodified tritonclient.http client against a real front end: health, metadata, config, and
inference with JSON and binary tensors, whose answers equal the model's own run."""

from __future__ import annotations

import numpy as np
import pytest

from tests.serve.http.models import DTYPES, MLP_SIZES

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(url=server.url)
    yield c
    c.close()


def _mlp_input(binary: bool, seed: int = 0) -> tuple[np.ndarray, httpclient.InferInput]:
    x = np.random.default_rng(seed).standard_normal((2, MLP_SIZES[0])).astype(np.float32)
    tensor = httpclient.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    return x, tensor


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "kiln" and "binary_tensor_data" in meta["extensions"]


def test_model_metadata_and_config(client):
    assert client.is_model_ready("mlp")
    assert client.is_model_ready("mlp", "3")
    assert not client.is_model_ready("mlp", "1")  # only the highest version is served
    meta = client.get_model_metadata("mlp")
    assert meta["versions"] == ["3"]
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [2, MLP_SIZES[0]]}]
    assert meta["outputs"][0]["shape"] == [2, MLP_SIZES[-1]]
    config = client.get_model_config("mlp")
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["kiln"]["queue_limit"] == 4 and config["kiln"]["priority"] == "rt"


@pytest.mark.parametrize("binary_in", [False, True])
@pytest.mark.parametrize("binary_out", [False, True])
def test_infer_equals_model_run(client, mlp_model, binary_in, binary_out):
    x, tensor = _mlp_input(binary_in)
    out = httpclient.InferRequestedOutput(mlp_model.outputs[0].name, binary_data=binary_out)
    result = client.infer("mlp", [tensor], outputs=[out], request_id="r1")
    expect = mlp_model.run({"input": x})[0]
    np.testing.assert_array_equal(result.as_numpy(mlp_model.outputs[0].name), expect)
    assert result.get_response()["id"] == "r1"
    assert result.get_response()["model_version"] == "3"


def test_infer_with_priority_timeout_and_version(client, mlp_model):
    x, tensor = _mlp_input(True, seed=1)
    result = client.infer("mlp", [tensor], model_version="3", priority=2, timeout=10_000_000)
    np.testing.assert_array_equal(result.as_numpy(mlp_model.outputs[0].name), mlp_model.run({"input": x})[0])


def test_every_datatype_both_ways(client):
    rng = np.random.default_rng(0)
    inputs, expect = [], {}
    for name in DTYPES:
        np_type = httpclient.triton_to_np_dtype(name)
        x = rng.integers(0, 2, (2, 3)).astype(np_type) if name == "BOOL" else rng.integers(0, 50, (2, 3)).astype(np_type)
        tensor = httpclient.InferInput(f"x_{name}", [2, 3], name)
        tensor.set_data_from_numpy(x, binary_data=name.startswith("INT"))
        inputs.append(tensor)
        expect[f"y_{name}"] = ~x if name == "BOOL" else x + x
    outputs = [httpclient.InferRequestedOutput(k, binary_data=k.endswith("64")) for k in expect]
    result = client.infer("dtypes", inputs, outputs=outputs)
    for key, want in expect.items():
        got = result.as_numpy(key)
        assert got.dtype == want.dtype, key
        np.testing.assert_array_equal(got, want)


def test_errors_reach_the_client(client):
    with pytest.raises(InferenceServerException, match="unknown model 'nope'"):
        client.get_model_metadata("nope")
    x = np.zeros((2, 5), np.float32)
    tensor = httpclient.InferInput("input", [2, 5], "FP32")
    tensor.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException, match="input 'input' has shape"):
        client.infer("mlp", [tensor])
