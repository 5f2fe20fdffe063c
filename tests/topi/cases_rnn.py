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


def _recurrence(name: str):
    """nn.*_recurrence cases: the full op's cases with X·W^T + Wb precomputed; R^T in panels of 4 gate
    rows (zero-padded when the gates do not fill the last) or, for the first case, plain."""
    def cases(rng):
        from kiln.transform.rnn_projection import pack_panels

        out = []
        for k, (attrs, arrays, _) in enumerate(_recurrent(name)(rng)):
            x, w, r, b, *rest = arrays
            nd, gh = w.shape[:2]
            xs = x.swapaxes(0, 1) if attrs.layout else x
            xp = np.concatenate([xs @ w[d].T + b[d, :gh] for d in range(nd)], axis=-1).astype(x.dtype)
            rt = r.transpose(0, 2, 1).copy() if k == 0 else pack_panels(r, 4)
            out.append((attrs, [xp.swapaxes(0, 1).copy() if attrs.layout else xp, rt, b[:, gh:], *rest], ()))
        return out

    return cases


def RNN_CASES() -> dict:
    return {**{name: _recurrent(name) for name in GATES}, **{f"{name}_recurrence": _recurrence(name) for name in GATES}}
