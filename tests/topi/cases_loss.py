"""Registry-test cases for the classification losses (deeper variants live in test_loss_computes.py)."""

from __future__ import annotations

from tests.topi.harness import rand

LOSSES = ("reduce.negative_log_likelihood_loss", "reduce.softmax_cross_entropy_loss")


def _loss(name: str):
    def cases(rng):
        from tests.topi.cases import A

        out = []
        for shape, red, ign, weighted in (((3, 5), "mean", None, False), ((2, 4, 3), "sum", 1, True),
                                          ((2, 3, 2, 2), "none", 2, True), ((4, 3), "mean", 0, True)):
            n, c, *d = shape
            target = rand((n, *d), "int64", rng, 0, c - 1)
            weight = rand((c,), "float32", rng) if weighted else None
            out.append((A(name, reduction=red, ignore_index=ign), [rand(shape, "float32", rng), target, weight], ()))
        return out

    return cases


def LOSS_CASES() -> dict:
    return {name: _loss(name) for name in LOSSES}
