"""Every knob value a schedule offers computes the same as its default: a tuned build may pick any."""

import numpy as np
import pytest

import kiln
from kiln.codegen.backends import build_library
from kiln.codegen.cache import CompileCache
from kiln.compiler.fuse import fuse
from kiln.ir.dtype import to_numpy
from kiln.tir.expr import IntImm
from kiln.tir.stmt import Buffer
from kiln.tune.search import random_config
from kiln.tune.tasks import extract_tasks, lower_with
from tests.tune.conftest import requires_gcc
from tests.tune.models import reduce_model, tiny_model

SAMPLES = 5


def _run(fn, kernel, inputs):
    n_in = kernel.num_params + len(kernel.constants)
    outs = [np.zeros([d.value for d in b.shape if isinstance(d, IntImm)], to_numpy(b.dtype))
            for b in kernel.signature[n_in:] if isinstance(b, Buffer)]
    fn(*inputs, *kernel.constants, *outs)
    return outs


@requires_gcc
@pytest.mark.parametrize("make", [tiny_model, reduce_model])
def test_sampled_configs_compute_what_the_default_computes(make, tmp_path):
    rng = np.random.default_rng(0)
    for task in extract_tasks(fuse(kiln.from_onnx(make())), "t"):
        configs = [task.default_config] + [random_config(task.space, rng) for _ in range(SAMPLES)]
        kernels = [lower_with(task.fn, f"c{i}", c) for i, c in enumerate(configs)]
        module = build_library([k.func for k in kernels], "sweep", cache=CompileCache(tmp_path))
        inputs = [rng.standard_normal([d.value for d in p.shape]).astype(to_numpy(p.dtype))
                  for p in kernels[0].signature[:kernels[0].num_params]]
        want = _run(module.get_function("c0"), kernels[0], inputs)
        for i, (cfg, k) in enumerate(zip(configs[1:], kernels[1:]), 1):
            for a, b in zip(want, _run(module.get_function(f"c{i}"), k, inputs)):
                np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"{task.name} under {cfg}")
