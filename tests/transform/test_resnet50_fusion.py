"""ResNet-50 end to end through the inference passes: every conv + bias + batch norm (+ residual
add) + relu ends in one fused kernel, and the optimized model computes what the original does."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

import kiln
import kiln.transform.fold_scale_axis  # registers the pass
import kiln.transform.simplify_inference
from kiln.ir import Call, Constant, Function, post_order, rewrite
from kiln.transform import PASSES, PassContext, Sequential, WellFormedCheck

MODEL = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
PIPELINE = ["fold-constant", "simplify-inference", "fold-constant", "fold-scale-axis", "fold-constant", "fuse-ops"]
N_PRIMITIVES = 58  # 53 conv groups + max_pool + average_pool + reshape + gemm + softmax


def _randomized(mod: kiln.ir.IRModule, seed: int = 0) -> kiln.ir.IRModule:
    """The light model fills its weights with one value (0.02): every class would tie. Random
    weights (He-scaled; 1-D batch-norm parameters in [0.5, 1.5)) make the comparison meaningful."""
    rng = np.random.default_rng(seed)

    def post(old, new):
        if isinstance(new, Call) and getattr(new.op, "name", "") == "tensor.constant_of_shape":
            shape = tuple(int(d) for d in new.args[0].data)
            if len(shape) == 1:
                return Constant(rng.uniform(0.5, 1.5, shape).astype(np.float32))
            fan_in = int(np.prod(shape[1:]))
            return Constant((rng.standard_normal(shape) * np.sqrt(1.0 / fan_in)).astype(np.float32))
        return new

    main = rewrite(mod.main, post)
    return kiln.ir.IRModule({"main": main}, mod.output_names, dict(mod.metadata))


@pytest.fixture(scope="module")
def models():
    mod = _randomized(kiln.from_onnx(onnx.load(str(MODEL))))
    seq = Sequential(tuple(PASSES[n] for n in PIPELINE))
    with PassContext(opt_level=3, instruments=[WellFormedCheck()]) as ctx:
        return mod, seq(mod, ctx)


def _ops(e) -> Counter:
    return Counter(x.op.name for x in post_order(e) if isinstance(x, Call) and not isinstance(x.op, Function))


def test_every_conv_block_is_one_kernel(models):
    _, opt = models
    prims = [e.op for e in post_order(opt.main) if isinstance(e, Call) and isinstance(e.op, Function)]
    assert all(f.attr("Primitive") for f in prims)
    assert len(prims) == N_PRIMITIVES
    # nothing is left outside a kernel, and batch norm / its scale and shift are gone
    outside = Counter(x.op.name for x in post_order(opt.main)
                      if isinstance(x, Call) and not isinstance(x.op, Function)) - sum(
        (_ops(f.body) for f in prims), Counter())
    assert not outside
    total = sum((_ops(f.body) for f in prims), Counter())
    assert not {"nn.batch_normalization", "math.mul", "math.add"} & set(total)
    shapes = Counter(tuple(sorted(_ops(f.body).items())) for f in prims if "nn.conv" in _ops(f.body))
    assert shapes == {
        (("nn.conv", 1), ("nn.relu", 1)): 33,  # conv + bias + bn + relu
        (("math.sum", 1), ("nn.conv", 1), ("nn.relu", 1)): 16,  # ... + residual add + relu
        (("nn.conv", 1),): 4,  # projection shortcuts: conv + bias + bn; their add is the other branch's
    }
    for f in prims:
        ops = _ops(f.body)
        if "nn.conv" in ops:
            conv = next(x for x in post_order(f.body) if isinstance(x, Call) and x.op.name == "nn.conv")
            assert len(conv.args) == 3, "bias + batch norm folded into the conv's bias"
            root = f.body.op.name
            assert root == ("nn.relu" if "nn.relu" in ops else "nn.conv")
    assert total["nn.conv"] == 53 and total["nn.relu"] == 49 and total["math.sum"] == 16


def test_outputs_match_unoptimized(models):
    mod, opt = models
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    want = kiln.evaluate(mod, {"gpu_0/data_0": x})
    got = kiln.evaluate(opt, {"gpu_0/data_0": x})
    assert len(want) == len(got) == 1
    assert want[0].std() > 1e-4  # not a tie: the classes differ
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-7)
