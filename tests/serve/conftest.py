"""Models the serve tests share, built once per session for Kiln's pool (-threading=kiln), so that
cancels reach running kernels: a long matmul chain (the best-effort work an RT request preempts),
a small static MLP (real-time work) and an MLP with a symbolic batch dim (dynamic batching)."""

import dataclasses

import numpy as np
import pytest

import kiln
from kiln.models import mlp
from kiln.target import Target
from tests.helpers import matmul_chain

LAYERS, ROWS, WIDTH = 16, 256, 512  # 16 GEMMs of 256x512x512: 20+ ms on two cores


def kiln_target() -> Target:
    return dataclasses.replace(Target.host(), threading="kiln")


@pytest.fixture(scope="session")
def chain():
    """(model, a function making feeds from a seed)"""
    cm = kiln.build(matmul_chain(LAYERS, ROWS, WIDTH), target=kiln_target())
    assert cm.executor == "aot"
    return cm, lambda seed: {"x": np.random.default_rng(seed).standard_normal((ROWS, WIDTH)).astype(np.float32)}


@pytest.fixture(scope="session")
def small():
    cm = kiln.build(mlp(batch=2, sizes=(64, 128, 16)), target=kiln_target())
    assert cm.executor == "aot"
    return cm, lambda seed: {"input": np.random.default_rng(seed).standard_normal((2, 64)).astype(np.float32)}


@pytest.fixture(scope="session")
def batchable():
    cm = kiln.build(mlp(batch="N", sizes=(32, 64, 8)), target=kiln_target())
    return cm, lambda seed, rows=1: {"input": np.random.default_rng(seed).standard_normal((rows, 32))
                                     .astype(np.float32)}
