"""Every operator either generates code (a te compute) or says it never will (host_only)."""

import pytest

import kiln.topi  # noqa: F401  (registers the computes)
from kiln.op import REGISTRY, define_op
from kiln.op.registry import ELEMWISE


def test_every_op_has_a_compute_or_is_host_only():
    neither = sorted(n for n, op in REGISTRY.items() if op.compute is None and not op.host_only)
    assert not neither, f"operators with neither a compute nor a host_only mark: {neither}"


def test_no_host_only_op_has_a_compute():
    both = sorted(n for n, op in REGISTRY.items() if op.compute is not None and op.host_only)
    assert not both, f"host_only operators with a compute: {both}"


def test_runtime_dims_only_on_ops_with_a_compute():
    assert all(op.compute is not None for op in REGISTRY.values() if op.runtime_dims)


def test_a_compute_attaches_once_and_never_to_a_host_only_op():
    ref = lambda a, x: x  # noqa: E731
    op = define_op("test.registry_complete", pattern=ELEMWISE, infer=lambda a, t, v: t[0], ref=ref)
    host = define_op("test.registry_host", pattern=ELEMWISE, infer=lambda a, t, v: t[0], ref=ref, host_only=True)
    try:
        op.attach_compute(ref)
        assert op.compute is ref
        with pytest.raises(ValueError, match="twice"):
            op.attach_compute(ref)
        with pytest.raises(ValueError, match="host_only"):
            host.attach_compute(ref)
    finally:
        del REGISTRY[op.name], REGISTRY[host.name]
