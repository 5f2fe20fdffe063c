"""Queue limit (503) and timeout (504) through the front end, the repository API (index, unload,
load, compile on load), /metrics as Prometheus text, and the per-request debug log line."""

from __future__ import annotations

import http.client
import json
import logging
import re
import shutil
import threading

import pytest

from tests.serve.http.models import tiny_mlp
from tests.serve.http.running_server import RunningServer
from tests.serve.http.test_malformed import GOOD, _infer, _request
from tests.serve.http.thread_dispatcher import ThreadDispatcher


def _post_in_threads(port: int, n: int, doc: dict) -> tuple[list[threading.Thread], list]:
    results: list = []

    def one() -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        results.append(_infer(c, doc))
        c.close()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    return threads, results


def _wait_pending(dispatcher: ThreadDispatcher, model: str, n: int) -> None:
    import time

    deadline = time.monotonic() + 30
    while dispatcher.pending.get(model, 0) < n:
        assert time.monotonic() < deadline, f"{n} requests never reached the dispatcher"
        time.sleep(0.01)


def test_queue_full_is_503_and_queued_ones_finish(server):
    server.dispatcher.gate.clear()
    try:
        threads, results = _post_in_threads(server.port, 4, GOOD)  # mlp's queue_limit is 4
        _wait_pending(server.dispatcher, "mlp", 4)
        status, doc = _infer(http.client.HTTPConnection("127.0.0.1", server.port, timeout=30), GOOD)
        assert status == 503 and "queued requests" in doc["error"]
    finally:
        server.dispatcher.gate.set()
    for t in threads:
        t.join(60)
    assert [s for s, _ in results] == [200] * 4


def test_timeout_is_504(server):
    server.dispatcher.gate.clear()
    try:
        threads, results = _post_in_threads(server.port, 1, GOOD | {"parameters": {"timeout": 1000}})
        _wait_pending(server.dispatcher, "mlp", 1)
        threading.Event().wait(0.05)
    finally:
        server.dispatcher.gate.set()
    threads[0].join(60)
    status, doc = results[0]
    assert status == 504 and "timeout" in doc["error"]


PROMETHEUS_LINE = re.compile(r'(# (HELP|TYPE) \w+ .+)|(\w+(\{(\w+="[^"]*",?)*\})? -?[0-9.e+Inf-]+)')


def test_metrics_are_prometheus_text(server):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    assert _infer(c, GOOD)[0] == 200
    c.request("GET", "/metrics")
    response = c.getresponse()
    text = response.read().decode()
    assert response.getheader("content-type").startswith("text/plain; version=0.0.4")
    lines = text.splitlines()
    assert all(PROMETHEUS_LINE.fullmatch(line) for line in lines), [x for x in lines if not PROMETHEUS_LINE.fullmatch(x)]
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if not line.startswith("#")}
    assert values['kiln_requests_total{model="mlp"}'] >= 1
    assert values['kiln_model_ready{model="dtypes"}'] == 1
    count = values['kiln_compute_seconds_count{model="mlp"}']
    assert values['kiln_compute_seconds_bucket{model="mlp",le="+Inf"}'] == count


def test_one_debug_log_line_per_request(server, caplog):
    with caplog.at_level(logging.DEBUG, logger="kiln.serve"):
        _request(http.client.HTTPConnection("127.0.0.1", server.port, timeout=30), "GET", "/v2/health/live")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "kiln.serve"]
    assert lines == [{"method": "GET", "path": "/v2/health/live", "status": 200, "ms": lines[0]["ms"],
                      "bytes_out": 0}]


@pytest.fixture
def own_server(tmp_path, compiled):
    """A server of its own (the repository API changes what it serves): mlp compiled, tiny as ONNX."""
    shutil.copytree(compiled["mlp"], tmp_path / "mlp")
    (tmp_path / "tiny.onnx").write_bytes(tiny_mlp(batch=1).SerializeToString())
    (tmp_path / "tiny.json").write_text('{"priority": "be", "queue_limit": 2}')
    running = RunningServer(tmp_path, ThreadDispatcher())
    yield running
    running.stop()


def _index(conn, ready: bool = False) -> dict:
    status, rows = _request(conn, "POST", "/v2/repository/index", json.dumps({"ready": ready}).encode())
    assert status == 200
    return {r["name"]: r["state"] for r in rows}


def test_repository_index_unload_and_load(own_server):
    conn = http.client.HTTPConnection("127.0.0.1", own_server.port, timeout=120)
    assert _index(conn) == {"mlp": "READY", "tiny": "READY"}
    assert _request(conn, "POST", "/v2/repository/models/mlp/unload")[0] == 200
    assert _index(conn) == {"mlp": "UNAVAILABLE", "tiny": "READY"}
    assert _index(conn, ready=True) == {"tiny": "READY"}
    status, doc = _infer(conn, GOOD)
    assert status == 404 and "not available: unloaded" in doc["error"]
    assert _request(conn, "POST", "/v2/repository/models/mlp/unload")[0] == 404
    assert _request(conn, "POST", "/v2/repository/models/mlp/load")[0] == 200
    assert _infer(conn, GOOD)[0] == 200


def test_load_of_a_model_added_later_compiles_it(own_server, tmp_path):
    conn = http.client.HTTPConnection("127.0.0.1", own_server.port, timeout=120)
    status, doc = _request(conn, "POST", "/v2/repository/models/later/load")
    assert status == 404 and "not in the repository" in doc["error"]
    (tmp_path / "later").mkdir()
    (tmp_path / "later" / "model.onnx").write_bytes(tiny_mlp(batch=1).SerializeToString())
    assert _request(conn, "POST", "/v2/repository/models/later/load")[0] == 200
    one = {"inputs": [{**GOOD["inputs"][0], "shape": [1, 8], "data": [0.5] * 8}]}
    assert _infer(conn, one, model="later")[0] == 200


def test_load_failure_names_the_problem(own_server, tmp_path):
    conn = http.client.HTTPConnection("127.0.0.1", own_server.port, timeout=120)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.onnx").write_bytes(b"not onnx")
    status, doc = _request(conn, "POST", "/v2/repository/models/broken/load")
    assert status == 400 and "model 'broken' failed to load" in doc["error"]
    assert _index(conn)["broken"] == "UNAVAILABLE"


def _hold_loads(monkeypatch) -> threading.Event:
    """Loads wait for the returned event: a test sees a model while it is loading."""
    from kiln.serve import model_store

    release, load_model = threading.Event(), model_store.load_model

    def held_load(source):
        release.wait(60)
        return load_model(source)
    monkeypatch.setattr(model_store, "load_model", held_load)
    return release


def test_unload_while_loading_leaves_it_unloaded(tmp_path, compiled, monkeypatch):
    from kiln.serve.model_store import ModelStore, State
    from kiln.serve.repository import Repository

    shutil.copytree(compiled["mlp"], tmp_path / "mlp")
    dispatcher = ThreadDispatcher()
    store = ModelStore(Repository(tmp_path), dispatcher)
    release = _hold_loads(monkeypatch)
    loading = store.load("mlp")
    store.unload("mlp")
    release.set()
    loading.result(60)
    assert store.get("mlp").state is State.UNAVAILABLE and "mlp" not in dispatcher.models



def test_loading_is_not_ready_and_a_reload_keeps_serving(own_server, tmp_path, monkeypatch):
    release = _hold_loads(monkeypatch)
    conn = http.client.HTTPConnection("127.0.0.1", own_server.port, timeout=120)
    (tmp_path / "fresh.onnx").write_bytes(tiny_mlp(batch=1).SerializeToString())
    loads = [own_server.store.load("fresh"), own_server.store.load("mlp")]
    status, doc = _request(conn, "GET", "/v2/models/fresh/ready")
    assert status == 503 and "loading" in doc["error"]
    assert _request(conn, "GET", "/v2/health/ready")[0] == 503
    assert _infer(conn, GOOD)[0] == 200  # mlp is reloading: its old model answers meanwhile
    release.set()
    for f in loads:
        f.result(120)
    assert _request(conn, "GET", "/v2/models/fresh/ready")[0] == 200
    assert _request(conn, "GET", "/v2/health/ready")[0] == 200
