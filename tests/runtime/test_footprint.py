"""The footprint: weights held once after a build, shared weight pages between processes, the report's fields."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.cli import main as kiln_main
from kiln.errors import InputError
from kiln.models import mlp, small_cnn
from kiln.runtime.model import Model
from kiln.runtime.process_memory import file_pages, resident_bytes

_ROOT = Path(__file__).resolve().parents[2]


def _live_numpy_bytes(build) -> tuple[object, int]:
    """What `build()` returns, and the bytes of numpy arrays still alive once it has returned."""
    tracemalloc.start()
    try:
        out = build()
        gc.collect()
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
        return out, sum(s.size for s in snap.statistics("filename"))
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("model, executor", [(mlp(batch=1), "aot"), (small_cnn(), "graph")])
def test_a_build_holds_the_weights_once(model, executor):
    """After a build the live arrays are the kernels' weights and the arena (a small margin for the runtime's
    own): neither the ONNX model's tensors nor the IR's constants are a second copy next to them."""
    data = model.SerializeToString()
    compiled, live = _live_numpy_bytes(lambda: kiln.build(data, executor=executor))
    fp = compiled.footprint()
    assert fp.packed_weights_bytes > 0
    assert live <= fp.packed_weights_bytes + fp.arena_bytes + 64 * 1024, (live, fp)


def test_the_build_report_and_footprint_list_every_quantity():
    compiled = kiln.build(mlp(batch=1))
    fp = compiled.footprint()
    weights = sum(t.nbytes for t in compiled.runner.weights)
    assert fp.weights_bytes == (784 * 1024 + 1024 * 1024 + 1024 * 10 + 1024 + 1024 + 10) * 4
    assert fp.packed_weights_bytes == weights and fp.arena_bytes == compiled.runner.arena_bytes
    assert fp.code_bytes == os.path.getsize(compiled.library.path) > 0
    assert fp.rss_after_load is None or fp.rss_after_load > weights
    stage, _, detail = compiled.report.stages[-1]
    assert stage == "memory" and detail.startswith("weights 7.1 MB, packed weights 7.1 MB, arena ")


def test_kiln_show_dir_lists_the_footprint(tmp_path, capsys):
    out = kiln.build(mlp(batch=1)).export(tmp_path / "mlp")
    assert kiln_main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    for field in ("weights:", "packed weights:", "arena:", "code:", "resident after load:", "resident after a run:"):
        assert f"\n  {field}" in text
    assert "weights:              7.1 MB" in text



def test_kiln_show_dir_says_why_it_did_not_run(tmp_path, capsys, monkeypatch):
    out = kiln.build(mlp(batch=1)).export(tmp_path / "mlp")

    def refuse(self, feeds):
        raise InputError("input 'x' cannot be random")

    monkeypatch.setattr(Model, "run", refuse)
    assert kiln_main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "(not run on random inputs: input 'x' cannot be random)" in text and "resident after a run: -" in text


_HOLDER = """
import sys, numpy as np, kiln
sess = kiln.load(sys.argv[1])
sess.run(None, {i.name: np.ones(i.shape, np.float32) for i in sess.get_inputs()})
print("ready", flush=True)
sys.stdin.readline()
"""


def _holder(directory: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(directory)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_two_processes_share_the_mapped_weights(tmp_path):
    """Both map weights.bin read-only: its resident pages are shared, so the second process adds none
    (its PSS for the file is half its RSS)."""
    if resident_bytes() is None or file_pages(__file__) is None:
        pytest.skip("no /proc/PID/smaps here")
    out = kiln.build(mlp(batch=1)).export(tmp_path / "mlp")
    weights = out / "weights.bin"
    first = _holder(out)
    try:
        second = _holder(out)
        try:
            pages = [file_pages(weights, p.pid) for p in (first, second)]
        finally:
            second.communicate("\n")
    finally:
        first.communicate("\n")
    size = weights.stat().st_size
    for fp in pages:
        assert fp.rss >= size - 4096 and fp.private == 0 and fp.shared == fp.rss, fp
        assert fp.pss <= fp.rss // 2 + 4096, fp
