"""`kiln bench-serve` on the tiny workload for about a second per variant: the table, the JSON and
the HTML page, with the in-process variants and one pair of OS processes."""

import json
import shutil

import pytest

from kiln.cli import main
from kiln.errors import KilnError
from kiln.serve.bench import bench_serve
from kiln.serve.loadgen import RtLoad, arrivals

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def test_bench_serve_writes_the_table_json_and_html(tmp_path, capsys):
    out, page = tmp_path / "serve.json", tmp_path / "serve.html"
    args = ["bench-serve", "--workload", "K-T", "--duration", "1", "--json", str(out), "--html", str(page)]
    for v in ("rt-alone", "be-alone", "reef", "fifo", "processes"):
        args += ["--variant", v]
    assert main(args) == 0
    assert "K-T: RT utilization 30%" in capsys.readouterr().out
    (w,) = json.loads(out.read_text())["workloads"]
    rows = {r["variant"]: r for r in w["rows"]}
    assert list(rows) == ["rt-alone", "be-alone", "reef", "fifo", "processes"]
    for v in ("rt-alone", "reef", "fifo", "processes"):
        assert rows[v]["rt_requests"] > 0 and rows[v]["rt_p99_ms"] >= rows[v]["rt_p50_ms"] > 0
        assert rows[v]["failures"] == 0
    for v in ("be-alone", "reef", "fifo", "processes"):
        assert rows[v]["be_per_s"] > 0
    assert rows["rt-alone"]["be_per_s"] is None and rows["reef"]["be_vs_capacity"] > 0
    assert rows["fifo"]["preemptions"] == 0
    assert page.read_text().count("<polyline") == 4


def test_arrivals_are_seeded_and_at_the_rate_asked():
    import numpy as np

    uniform = arrivals(RtLoad("m", 100.0), 2.0, np.random.default_rng(0))
    assert len(uniform) in (200, 201) and np.allclose(np.diff(uniform), 0.01)
    poisson = [arrivals(RtLoad("m", 100.0, "poisson"), 10.0, np.random.default_rng(s)) for s in (1, 1, 2)]
    assert np.array_equal(poisson[0], poisson[1]) and not np.array_equal(poisson[0], poisson[2])
    assert 900 < len(poisson[0]) < 1100


def test_unknown_workloads_and_variants_are_refused():
    with pytest.raises(KilnError, match="unknown workload 'K-Z'"):
        bench_serve(["K-Z"], seconds=1)
    with pytest.raises(KilnError, match="unknown bench-serve variant 'fast'"):
        bench_serve(["K-T"], seconds=1, variants=("fast",))
