"""Registry-test cases for nn.rnn / nn.gru / nn.lstm through the te evaluator (the scan runs its step
with numpy); the compiled versions are in test_rnn_compiled.py."""

from __future__ import annotations

import numpy as np

from tests.topi.harness import rand

GATES = {"nn.rnn": 1, "nn.gru": 3, "nn.lstm": 4}


def _recurrent(name: str):
    def cases(rng):
        from tests.topi.cases import A

        out = []
        for direction, layout, dtype, extra in (("forward", 0, "float32", {}),
                                                ("bidirectional", 1, "float64", {"clip": 1.0}),
                                                ("reverse", 0, "float16", {})):
            nd = 2 if direction == "bidirectional" else 1
            seq, batch, inp, hidden = 4, 3, 2, 5
            g = GATES[name] * hidden
            state = (batch, nd, hidden) if layout else (nd, batch, hidden)
            lens = np.array([4, 1, 0], np.int32)
            arrays = [rand((batch, seq, inp) if layout else (seq, batch, inp), dtype, rng),
                      (rand((nd, g, inp), dtype, rng) / 6).astype(dtype),
                      (rand((nd, g, hidden), dtype, rng) / 6).astype(dtype),
                      rand((nd, 2 * g), dtype, rng), lens, rand(state, dtype, rng)]
            if name == "nn.lstm":
                arrays += [rand(state, dtype, rng), rand((nd, 3 * hidden), dtype, rng)]
            if name == "nn.gru":
                extra = {**extra, "linear_before_reset": int(direction != "forward")}
            out.append((A(name, direction=direction, layout=layout, **extra), arrays, ()))
        return out

    return cases


def RNN_CASES() -> dict:
    return {name: _recurrent(name) for name in GATES}
