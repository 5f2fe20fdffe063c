"""The accelerator's configuration as JSON and the target string npu-sim."""

import pytest

from kiln.npu.config import NpuConfig, NpuConfigError
from kiln.target import Target


def test_the_configuration_round_trips_through_json():
    config = NpuConfig(rows=2, banks=4, dma_bytes_per_cycle=64)
    assert NpuConfig.from_json(config.to_json()) == config
    assert NpuConfig.from_json('{"banks": 16}') == NpuConfig(banks=16)


def test_an_unknown_field_or_a_bad_value_is_named():
    with pytest.raises(NpuConfigError, match="unknown npu config field.*bankz"):
        NpuConfig.from_json('{"bankz": 4}')
    with pytest.raises(NpuConfigError, match="rows=0"):
        NpuConfig(rows=0)


def test_npu_sim_is_a_target_kind():
    assert Target.parse("npu-sim").kind == "npu-sim"
    assert str(Target.parse("npu-sim")).startswith("npu-sim ")


def test_dma_costs_latency_plus_bandwidth():
    config = NpuConfig(dma_latency=10, dma_bytes_per_cycle=8)
    assert config.dma_cycles(17) == 13
