"""Registry-test cases for the computes of resize, einsum, linear (de)quantization,
center_crop_pad, tensor_scatter and attention (deeper variants live in test_more_computes.py)."""

from __future__ import annotations

import numpy as np

from tests.topi.harness import rand


def _cases():
    from tests.topi.cases import A, i64

    f = lambda rng, *s: rand(s, "float32", rng)
    return {
        "vision.resize": lambda rng: [
            (A("vision.resize", mode=m), [f(rng, 1, 2, 5, 3), None, np.array([1, 1, 1.4, 2.0], np.float32)], (2,))
            for m in ("nearest", "linear", "cubic")],
        "linalg.einsum": lambda rng: [(A("linalg.einsum", equation="ij,jk->ik"), [f(rng, 3, 5), f(rng, 5, 2)], ())],
        "quant.quantize_linear": lambda rng: [
            (A("quant.quantize_linear"), [f(rng, 3, 5) * 30, np.array(0.3, np.float32), np.array(4, np.uint8)], ())],
        "quant.dequantize_linear": lambda rng: [
            (A("quant.dequantize_linear", axis=0), [rand((3, 5), "int8", rng), f(rng, 3), np.zeros(3, np.int8)], ())],
        "tensor.center_crop_pad": lambda rng: [(A("tensor.center_crop_pad"), [f(rng, 5, 4), i64(3, 7)], (1,))],
        "tensor.tensor_scatter": lambda rng: [
            (A("tensor.tensor_scatter", axis=1), [f(rng, 2, 7, 3), f(rng, 2, 2, 3), i64(1, 5)], ())],
        "nn.attention": lambda rng: [  # deeper variants: tests/runtime/test_dynamic_groups.py
            (A("nn.attention", is_causal=1), [f(rng, 1, 4, 3, 5), f(rng, 1, 2, 4, 5), f(rng, 1, 2, 4, 6)], ()),
            (A("nn.attention", q_num_heads=2, kv_num_heads=2, qk_matmul_output_mode=3),
             [f(rng, 2, 3, 8), f(rng, 2, 4, 8), f(rng, 2, 4, 6), f(rng, 3, 4)], ())],
    }


MORE_CASES = _cases
