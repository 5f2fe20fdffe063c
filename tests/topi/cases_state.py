"""Registry-test cases (te evaluator vs reference) for the stateful sequence ops: causal conv with
state and linear attention (compiled variants: tests/topi/test_causal_conv.py, test_linear_attention.py)."""

from __future__ import annotations

import numpy as np

from tests.topi.harness import rand


def _cases():
    from tests.topi.cases import A

    f = lambda rng, *s: rand(s, "float32", rng) * 0.3  # noqa: E731
    la = "nn.linear_attention"
    return {
        "nn.causal_conv_with_state": lambda rng: [
            (A("nn.causal_conv_with_state", activation="silu"), [f(rng, 2, 3, 5), f(rng, 3, 1, 4), f(rng, 3),
                                                                 f(rng, 2, 3, 3)], ()),
            (A("nn.causal_conv_with_state"), [f(rng, 1, 2, 2), f(rng, 2, 1, 3)], ())],
        la: lambda rng: [
            (A(la, q_num_heads=2, kv_num_heads=1, update_rule="gated_delta"),
             [f(rng, 2, 3, 8), f(rng, 2, 3, 4), f(rng, 2, 3, 5), f(rng, 2, 1, 4, 5), -np.abs(f(rng, 2, 3, 4)),
              np.full((2, 3, 1), 0.5, np.float32)], ()),
            (A(la, q_num_heads=2, kv_num_heads=2, update_rule="linear"), [f(rng, 1, 4, 6), f(rng, 1, 4, 6),
                                                                          f(rng, 1, 4, 2)], ())],
    }


STATE_CASES = _cases
