"""The error report: one row per float tensor, numbers that match a direct computation, strict JSON."""

import json
import warnings

import numpy as np
import pytest

import kiln
from kiln.quantization.error_report import ErrorReport, ErrorSum
from kiln.quantization.params import activation_params
from tests.quantization.models import cnn_logits, images, write_npz_dir


def test_error_sum_matches_a_direct_computation():
    rng = np.random.default_rng(0)
    ref = [rng.standard_normal(100).astype(np.float32) for _ in range(3)]
    got = [r + 0.01 * rng.standard_normal(100).astype(np.float32) for r in ref]
    params = activation_params(-4.0, 4.0)
    s = ErrorSum("t", "Conv", params)
    for r, g in zip(ref, got):
        s.add(r, g)
    row = s.result()
    a, b = np.concatenate(ref).astype(np.float64), np.concatenate(got).astype(np.float64)
    assert row.sqnr_db == pytest.approx(10 * np.log10((a @ a) / ((a - b) @ (a - b))))
    assert row.max_abs_error == pytest.approx(np.abs(a - b).max())
    assert row.cosine == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    own = a - params.fake_quantize(a)
    assert row.own_sqnr_db == pytest.approx(10 * np.log10((a @ a) / (own @ own)))


def test_exact_values_have_infinite_sqnr_written_as_null():
    s = ErrorSum("t", "Relu", None)
    s.add(np.ones(4), np.ones(4))
    report = ErrorReport([s.result()], 1, "static")
    row = json.loads(report.to_json())["tensors"][0]
    assert row["sqnr_db"] is None and row["own_sqnr_db"] is None and row["cosine"] == 1.0
    assert "inf" in report.table()


def test_the_report_of_a_cnn_covers_every_layer(tmp_path):
    calib = write_npz_dir(str(tmp_path), "image", images(8))
    result = kiln.quantize(cnn_logits(), calibrate=calib, report=True)
    rows = {t.name: t for t in result.report.tensors}
    assert list(rows)[0] == "stem.bn" and "logits" in rows and len(rows) == 13
    assert rows["stem.bn"].op == "Conv" and rows["pool"].own_sqnr_db is not None
    assert all(t.sqnr_db > 20 and t.cosine > 0.99 for t in rows.values())
    assert rows["logits"].own_sqnr_db is None  # the model's output stays float
    assert result.report.feeds == 8 and "static, minmax" in result.report.mode


def test_a_dynamic_report_without_data_uses_random_feeds_and_says_so():
    from kiln.models import bert_tiny

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report = kiln.quantize(bert_tiny(batch=1), dynamic=True, report=True).report
    assert any("random feeds" in str(w.message) for w in seen)
    assert report.feeds == 4 and all(t.cosine > 0.99 for t in report.tensors)
