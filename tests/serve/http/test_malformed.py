"""Raw HTTP (http.client) for every malformed request: each gets its status and a JSON error naming
what was wrong, on a keep-alive connection that then still answers a good request."""

from __future__ import annotations

import http.client
import json
import struct
import threading

import numpy as np
import pytest

from tests.serve.http.models import MLP_SIZES

GOOD = {"inputs": [{"name": "input", "shape": [2, MLP_SIZES[0]], "datatype": "FP32",
                    "data": [0.5] * (2 * MLP_SIZES[0])}]}


def _request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes = b"",
             headers: dict | None = None) -> tuple[int, dict | bytes]:
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    if response.getheader("content-type") == "application/json":
        return response.status, json.loads(data)
    return response.status, data


def _infer(conn, doc: dict | bytes, model: str = "mlp", headers: dict | None = None) -> tuple[int, dict | bytes]:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return _request(conn, "POST", f"/v2/models/{model}/infer", body, headers)


@pytest.fixture
def conn(server):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    yield c
    status, doc = _infer(c, GOOD)  # the same connection still serves a good request afterwards
    assert status == 200, doc
    c.close()


def _with(**changes) -> dict:
    tensor = {**GOOD["inputs"][0], **changes}
    return {"inputs": [tensor]}


BINARY = np.zeros((2, MLP_SIZES[0]), np.float32).tobytes()

CASES = [  # (id, request document or body, headers, status, words the error must contain)
    ("bad json", b"{not json", None, 400, "not valid JSON"),
    ("not an object", b"[1, 2]", None, 400, "JSON object"),
    ("inputs not a list", {"inputs": 3}, None, 400, "'inputs' must be a list"),
    ("unknown input", _with(name="image"), None, 400, "no input 'image'"),
    ("missing input", {"inputs": []}, None, 400, "needs input(s) input"),
    ("twice", {"inputs": GOOD["inputs"] * 2}, None, 400, "given twice"),
    ("wrong dtype", _with(datatype="FP64"), None, 400, "datatype 'FP64'; the model takes FP32"),
    ("bytes for a float model", _with(datatype="BYTES", data=["a"] * 16), None, 400, "the model takes FP32"),
    ("unknown datatype", _with(datatype="FP128"), None, 400, "datatype 'FP128'"),
    ("wrong shape", _with(shape=[4, 4], data=[0.5] * 16), None, 400, "input 'input' has shape (4, 4)"),
    ("shape not ints", _with(shape=["a"]), None, 400, "'shape' must be a list of non-negative integers"),
    ("data count", _with(data=[1.0] * 3), None, 400, "has 3 elements but shape [2, 8] takes 16"),
    ("data not numbers", _with(data=["x"] * 16), None, 400, "does not hold FP32 values"),
    ("no data", _with(data=None) | {"inputs": [{"name": "input", "shape": [2, 8], "datatype": "FP32"}]}, None, 400,
     "neither 'data' nor a binary_data_size"),
    ("unknown output", GOOD | {"outputs": [{"name": "logits"}]}, None, 400, "no output 'logits'"),
    ("bad priority", GOOD | {"parameters": {"priority": "urgent"}}, None, 400, "parameter priority"),
    ("bad timeout", GOOD | {"parameters": {"timeout": -1}}, None, 400, "parameter timeout"),
    ("unknown model", GOOD, None, 404, "unknown model 'nope'"),
    ("unknown version", GOOD, None, 404, "has no version '7'"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_infer(conn, case):
    name, doc, headers, status, words = case
    model = {"unknown model": "nope", "unknown version": "mlp/versions/7"}.get(name, "mlp")
    got, body = _infer(conn, doc, model, headers)
    assert got == status and words in body["error"], body


def _binary_body(size_claimed: int, blob: bytes) -> tuple[bytes, dict]:
    head = json.dumps({"inputs": [{"name": "input", "shape": [2, MLP_SIZES[0]], "datatype": "FP32",
                                   "parameters": {"binary_data_size": size_claimed}}]}).encode()
    return head + blob, {"Inference-Header-Content-Length": str(len(head))}


@pytest.mark.parametrize(("claimed", "blob", "words"), [
    (len(BINARY), BINARY[:-4], "binary data is truncated"),
    (len(BINARY) - 4, BINARY[:-4], "binary_data_size is 60 bytes but shape [2, 8] of FP32 takes 64"),
    (len(BINARY), BINARY + b"1234", "4 bytes of binary data after the last binary input"),
], ids=["truncated", "size wrong for shape", "trailing bytes"])
def test_malformed_binary(conn, claimed, blob, words):
    body, headers = _binary_body(claimed, blob)
    status, doc = _infer(conn, body, headers=headers)
    assert status == 400 and words in doc["error"], doc


def test_header_length_beyond_body(conn):
    status, doc = _infer(conn, json.dumps(GOOD).encode(), headers={"Inference-Header-Content-Length": "99999"})
    assert status == 400 and "Inference-Header-Content-Length" in doc["error"]


def test_binary_good_request_answers_binary(conn, mlp_model):
    x = np.arange(16, dtype=np.float32).reshape(2, 8) / 16
    body, headers = _binary_body(x.nbytes, x.tobytes())
    doc = json.loads(body[:int(headers["Inference-Header-Content-Length"])])
    doc["parameters"] = {"binary_data_output": True}
    head = json.dumps(doc).encode()
    conn.request("POST", "/v2/models/mlp/infer", body=head + x.tobytes(),
                 headers={"Inference-Header-Content-Length": str(len(head))})
    response = conn.getresponse()
    data = response.read()
    split = int(response.getheader("Inference-Header-Content-Length"))
    meta = json.loads(data[:split])["outputs"][0]
    got = np.frombuffer(data[split:], np.float32).reshape(meta["shape"])
    np.testing.assert_array_equal(got, mlp_model.run({"input": x})[0])


def test_bytes_tensor_codec_errors(conn):
    text = struct.pack("<I", 10) + b"abc"  # says 10 bytes, holds 3
    head = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES",
                                   "parameters": {"binary_data_size": len(text)}}]}).encode()
    status, doc = _infer(conn, head + text, headers={"Inference-Header-Content-Length": str(len(head))})
    assert status == 400 and "BYTES" in doc["error"]


@pytest.mark.parametrize(("method", "path", "status", "words"), [
    ("GET", "/v2/models/mlp/infer", 405, "use POST"),
    ("GET", "/v3/anything", 404, "no endpoint /v3/anything"),
    ("GET", "/v2/models/nope/ready", 404, "unknown model 'nope'"),
    ("POST", "/v2/repository/models/%2E%2E/load", 400, "not a valid model name"),
    ("POST", "/v2/repository/models/..%2Fetc/load", 404, "no endpoint"),
])
def test_routes_and_methods(conn, method, path, status, words):
    got, doc = _request(conn, method, path)
    assert got == status and words in doc["error"], doc


def test_body_over_the_limit_is_refused_and_the_connection_still_serves(conn):
    status, doc = _infer(conn, b"x" * ((1 << 20) + 1))
    assert status == 413 and "the limit is 1048576" in doc["error"]


def test_body_far_over_the_limit_closes_the_connection(server):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    c.putrequest("POST", "/v2/models/mlp/infer")
    c.putheader("Content-Length", str(10 << 20))
    c.endheaders()  # the body is never sent: the server answers from the declared length alone
    response = c.getresponse()
    assert response.status == 413 and response.getheader("connection") == "close"
    assert "the limit is 1048576" in json.loads(response.read())["error"]
    c.close()


def test_gzip_body_is_inflated(conn):
    import gzip

    status, doc = _infer(conn, gzip.compress(json.dumps(GOOD).encode()), headers={"Content-Encoding": "gzip"})
    assert status == 200, doc
    status, doc = _infer(conn, b"junk", headers={"Content-Encoding": "gzip"})
    assert status == 400 and "not valid gzip" in doc["error"]


def test_bad_requests_beside_good_ones_disturb_nothing(server, mlp_model):
    expect = mlp_model.run({"input": np.full((2, MLP_SIZES[0]), 0.5, np.float32)})[0]
    bad = [c for c in CASES if c[0] not in ("unknown model", "unknown version")]
    answers: list = []

    def client(i: int) -> None:
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        for j in range(len(bad)):
            _, doc, headers, status, _ = bad[(i + j) % len(bad)]
            answers.append(("bad", _infer(c, doc, headers=headers)[0] == status))
            got, out = _infer(c, GOOD)
            answers.append(("good", got == 200 and np.array_equal(
                np.array(out["outputs"][0]["data"], np.float32).reshape(expect.shape), expect)))
        c.close()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(answers) == 8 * len(bad) and all(ok for _, ok in answers)


def test_accepted_connections_have_tcp_nodelay(server):
    import socket

    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    assert _request(c, "GET", "/v2/health/live")[0] == 200
    sockets = [p.transport.get_extra_info("socket") for p in list(server.server.server_state.connections)]
    assert sockets and all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in sockets)
    c.close()
