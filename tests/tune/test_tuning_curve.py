"""scripts/tuning_curve.py cuts a tuning run's records at the checkpoints the run reached."""

import importlib.util
from pathlib import Path

from kiln.tune.records import Record

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tuning_curve.py"


def _script():
    spec = importlib.util.spec_from_file_location("tuning_curve", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_checkpoints_stop_where_the_run_stopped():
    recs = [Record("k", "t", {}, 1.0, timestamp=1000.0 + s) for s in (5, 70, 400)]  # the run lasted 400 s
    cuts = _script().checkpoints(recs, 1000.0, [1, 2, 5, 10])
    assert cuts == [("untuned", 1000.0), ("1 min", 1060.0), ("2 min", 1120.0), ("5 min", 1300.0), ("final", None)]
