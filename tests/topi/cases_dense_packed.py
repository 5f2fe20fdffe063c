"""Registry-test cases for linalg.dense_packed (the packed x86 path end to end: tests/topi/test_dense_x86.py)."""

from __future__ import annotations

from tests.topi.harness import rand


def _packed(rng, k: int, n: int, nr: int, dtype: str):
    """A random [ceil(n / nr), k, nr] panel weight (columns past n are never read)."""
    return rand((-(-n // nr), k, nr), dtype, rng)


def _cases(rng):
    from tests.topi.cases import A

    return [(A("linalg.dense_packed", units=n), [rand(ashape, dtype, rng), _packed(rng, ashape[-1], n, nr, dtype)], ())
            for ashape, n, nr, dtype in (((3, 5), 7, 4, "float32"), ((1, 1), 1, 8, "float32"),
                                          ((2, 3, 6), 16, 8, "float64"), ((4,), 3, 2, "float32"))]


def DENSE_PACKED_CASES() -> dict:
    return {"linalg.dense_packed": _cases}
