"""Tiles and the cost model: every candidate fits and lowers; the model's ranking agrees with the
simulator's (its pick within 5% of the best simulated tile, and a strong rank correlation)."""

import numpy as np
import pytest

from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec
from kiln.npu.cost_model import predict
from kiln.npu.lower_conv import lower_conv
from kiln.npu.simulator import Simulator
from kiln.npu.tiling import NoTileFitsError, candidates, simple_tile

LAYERS = [ConvSpec(1, 28, 28, 32, 32, 3, 3, 1, (1, 1, 1, 1)), ConvSpec(1, 14, 14, 64, 128, 1, 1, 2, (0, 0, 0, 0)),
          ConvSpec(1, 14, 14, 64, 64, 3, 3, 1, (1, 1, 1, 1)), ConvSpec(1, 7, 7, 128, 128, 3, 3, 1, (1, 1, 1, 1)),
          ConvSpec(1, 28, 28, 48, 48, 3, 3, 2, (1, 1, 1, 1), depthwise=True)]


def _simulated(spec, tile, config):
    dram = {"x": np.zeros((spec.n, spec.h, spec.w, spec.cin), np.float32),
            "w": np.zeros((spec.kh, spec.kw, spec.weight_cin, spec.cout), np.float32),
            "y": np.zeros((spec.n, spec.out_h, spec.out_w, spec.cout), np.float32)}
    return Simulator(config).run(lower_conv("c", spec, tile, ("x", "w", "y"), [], config), dram,
                                 functional=False).cycles


@pytest.mark.parametrize("spec", LAYERS, ids=lambda s: f"{s.cin}x{s.h}k{s.kh}s{s.stride}{'dw' if s.depthwise else ''}")
def test_the_cost_models_pick_is_within_5_percent_of_the_simulators_best(spec):
    config = NpuConfig(inp_bytes=64 << 10, wgt_bytes=64 << 10)
    tiles = candidates(spec, config)
    simulated = np.array([_simulated(spec, t, config) for t in tiles])
    predicted = np.array([predict(spec, t, config).cycles for t in tiles])
    assert simulated[int(np.argmin(predicted))] <= 1.05 * simulated.min()
    if len(tiles) > 3:
        ranks = lambda v: np.argsort(np.argsort(v))  # noqa: E731
        assert np.corrcoef(ranks(simulated), ranks(predicted))[0, 1] > 0.8


def test_simple_tiling_takes_one_channel_block_and_the_most_rows_that_fit():
    spec = LAYERS[0]
    tile = simple_tile(spec, NpuConfig(inp_bytes=16 << 10))
    assert (tile.cout, tile.cin) == (16, 16) and 1 <= tile.rows < spec.out_h


def test_a_layer_no_tile_fits_is_named():
    with pytest.raises(NoTileFitsError, match="no tile"):
        candidates(LAYERS[0], NpuConfig(inp_bytes=256, wgt_bytes=256))
