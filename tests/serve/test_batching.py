"""Dynamic batching: requests queued within the batch delay run as one batch, and each gets what its
own run gives."""

import shutil

import numpy as np
import pytest

from kiln.serve.dispatch import InferRequest, ModelConfig
from kiln.serve.scheduler import ReefScheduler

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def test_batched_requests_answer_as_unbatched_runs(batchable, chain):
    bm, feeds = batchable
    cm, cfeeds = chain
    s = ReefScheduler()
    s.add("block", cm, ModelConfig())
    s.add("m", bm, ModelConfig(max_batch=8, batch_delay_us=200_000))
    try:
        blocker = s.submit(InferRequest("block", cfeeds(0)))
        rows = [1, 2, 1, 3, 1]
        futures = [s.submit(InferRequest("m", feeds(i, r))) for i, r in enumerate(rows)]
        out = bm.outputs[0].name
        for i, (f, r) in enumerate(zip(futures, rows)):
            got = f.result(20)[out]
            assert got.shape[0] == r
            np.testing.assert_allclose(got, bm.run(feeds(i, r))[0], rtol=1e-5, atol=1e-6)
        blocker.result(20)
        sizes = s.stats()["m"].batch_sizes
        assert sizes.n < len(rows) and sizes.counts[0] < sizes.n  # fewer runs than requests, one of several rows
    finally:
        s.close()


def test_a_batch_stops_at_max_batch_rows(batchable):
    bm, feeds = batchable
    s = ReefScheduler(fifo=True)
    s.add("m", bm, ModelConfig(max_batch=2, batch_delay_us=100_000))
    try:
        futures = [s.submit(InferRequest("m", feeds(i, 1))) for i in range(4)]
        for i, f in enumerate(futures):
            np.testing.assert_allclose(f.result(20)[bm.outputs[0].name], bm.run(feeds(i, 1))[0], rtol=1e-5, atol=1e-6)
        assert s.stats()["m"].batch_sizes.n == 2
    finally:
        s.close()
