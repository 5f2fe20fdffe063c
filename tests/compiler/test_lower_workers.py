"""Worker processes lower fused groups into the kernel cache: the C is the one the building process renders."""

import time

import pytest

from kiln.codegen.c_source import RENDERED_ATTR
from kiln.compiler import lower_workers
from kiln.compiler.fuse import fuse
from kiln.compiler.kernel_cache import KernelCache
from kiln.compiler.lower import _distinct, lower_groups
from kiln.errors import KilnError
from kiln.frontend.onnx import from_onnx
from kiln.models import small_cnn
from kiln.runtime.executor import primitive_functions
from kiln.target import Target


@pytest.fixture(scope="module")
def fused():
    return fuse(from_onnx(small_cnn(batch=1)), 2)


def _code(kernels) -> list[str]:
    return [dict(k.func.attrs)[RENDERED_ATTR].code for k in kernels]


def _alone(fused, root, monkeypatch) -> list[str]:
    monkeypatch.setenv(lower_workers.ENV_WORKERS, "0")
    return _code(lower_groups(fused, kernels=KernelCache(root))[0])


def test_a_worker_lowers_into_the_cache_what_the_building_process_would(fused, tmp_path, monkeypatch):
    jobs = _distinct(primitive_functions(fused))
    with lower_workers.prefetch(jobs, tmp_path / "w", None, Target.host(), 1) as p:
        deadline = time.monotonic() + 300
        while not (len(p._held) == len(jobs) and all(e.is_set() for e in p._held.values())):
            assert time.monotonic() < deadline, "the worker did not answer"
            time.sleep(0.1)
    stored = len(list((tmp_path / "w").rglob("*.json")))
    assert stored > 0
    cache = KernelCache(tmp_path / "w")
    monkeypatch.setenv(lower_workers.ENV_WORKERS, "0")
    from_workers = _code(lower_groups(fused, kernels=cache)[0])
    assert cache.hits == stored
    assert from_workers == _alone(fused, tmp_path / "alone", monkeypatch)


def test_a_build_shared_with_workers_renders_the_same_c(fused, tmp_path, monkeypatch):
    alone = _alone(fused, tmp_path / "alone", monkeypatch)
    monkeypatch.setattr(lower_workers, "MIN_GROUPS", 2)
    monkeypatch.setenv(lower_workers.ENV_WORKERS, "1")
    assert lower_workers.worker_count(len(_distinct(primitive_functions(fused)))) == 1
    assert _code(lower_groups(fused, kernels=KernelCache(tmp_path / "shared"))[0]) == alone


def test_worker_count(monkeypatch):
    monkeypatch.delenv(lower_workers.ENV_WORKERS, raising=False)
    assert lower_workers.worker_count(lower_workers.MIN_GROUPS - 1) == 0
    assert lower_workers.worker_count(100, Target.parse("c -cores=4")) == 3
    assert lower_workers.worker_count(100, Target.parse("c -cores=1")) == 0
    monkeypatch.setenv(lower_workers.ENV_WORKERS, "2")
    assert lower_workers.worker_count(100) == 2
    monkeypatch.setenv(lower_workers.ENV_WORKERS, "many")
    with pytest.raises(KilnError, match="KILN_LOWER_WORKERS"):
        lower_workers.worker_count(100)
