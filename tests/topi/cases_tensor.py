"""Cases of the tensor (injective, scatter, extern) computes; merged into tests/topi/cases.py."""

from __future__ import annotations

import numpy as np

from tests.topi.harness import rand


def _cases():
    from tests.topi.cases import A, i64

    def f(rng, *shape, dtype="float32"):
        return rand(shape, dtype, rng)

    return {
        "tensor.reshape": lambda rng: [(A("tensor.reshape", allowzero=z), [f(rng, 2, 3, 5), s], (1,))
                                       for z, s in ((0, i64(5, -1)), (0, i64(0, 15)), (1, i64(30)), (0, i64(3, 1, 10)))],
        "tensor.flatten": lambda rng: [(A("tensor.flatten", axis=a), [f(rng, 2, 3, 5)], ()) for a in (0, 1, -1, 3)],
        "tensor.squeeze": lambda rng: [(None, [f(rng, 1, 3, 1)], ()), (None, [f(rng, 1, 3, 1), i64(-1)], (1,))],
        "tensor.unsqueeze": lambda rng: [(None, [f(rng, 3, 5), i64(0, -1)], (1,)), (None, [f(rng), i64(0)], (1,))],
        "tensor.transpose": lambda rng: [(A("tensor.transpose", perm=p), [f(rng, 2, 3, 5)], ()) for p in (None, (1, 2, 0))],
        "tensor.concat": lambda rng: [(A("tensor.concat", axis=a), [f(rng, 2, 3), f(rng, 2, 3), f(rng, 2, 3)], ())
                                      for a in (0, -1)] + [(A("tensor.concat", axis=1), [f(rng, 2, 1), f(rng, 2, 4)], ())],
        "tensor.split": lambda rng: [(A("tensor.split", axis=1, num_outputs=3), [f(rng, 2, 7)], ()),
                                     (A("tensor.split", axis=0), [f(rng, 5, 2), i64(2, 0, 3)], (1,))],
        "tensor.slice": lambda rng: [(None, [f(rng, 5, 7), i64(1, -1), i64(4, -8), i64(0, 1), i64(2, -2)], (1, 2, 3, 4)),
                                     (None, [f(rng, 5, 7), i64(-3), i64(100)], (1, 2)),
                                     (None, [f(rng, 5, 7), i64(6, 0), i64(-100, 9), i64(1, 0), i64(-3, 1)], (1, 2, 3, 4))],
        "tensor.gather": lambda rng: [(A("tensor.gather", axis=a), [f(rng, 3, 5), rand(s, "int64", rng, -3, 2)], ())
                                      for a in (0, 1) for s in ((), (2,), (2, 4))],
        "tensor.gather_elements": lambda rng: [(A("tensor.gather_elements", axis=a),
                                                [f(rng, 3, 5), rand((2, 4), "int32", rng, -3, 2)], ()) for a in (0, -1)],
        "tensor.gather_nd": lambda rng: [(A("tensor.gather_nd", batch_dims=b), [f(rng, 2, 3, 4), i], ())
                                         for b, i in ((0, rand((5, 2), "int64", rng, -2, 1)),
                                                      (1, rand((2, 3, 1), "int64", rng, 0, 2)),
                                                      (0, rand((2, 3), "int64", rng, 0, 1)))],
        "tensor.scatter_elements": lambda rng: [
            (A("tensor.scatter_elements", axis=a, reduction=r),
             [f(rng, 4, 5), rand((2, 3), "int64", rng, -4, 3) if r != "none" else np.array([[0, 3, -1], [2, 1, 0]]),
              f(rng, 2, 3)], ())
            for a in (0, 1) for r in ("none", "add", "mul", "max", "min")],
        "tensor.scatter_nd": lambda rng: [
            (A("tensor.scatter_nd", reduction=r), [f(rng, 4, 5, 3), i, f(rng, *s)], ())
            for r in ("none", "add", "mul", "max", "min")
            for i, s in ((np.array([[1], [3]]), (2, 5, 3)), (np.array([[0, 1], [-1, 4], [0, 1]]) if r != "none"
                                                            else np.array([[0, 1], [3, 4], [2, 2]]), (3, 3)))],
        "tensor.pad": lambda rng: [(A("tensor.pad", mode=m), [f(rng, 3, 4), p, v, ax], (1, 3))
                                   for m in ("constant", "edge", "reflect", "wrap")
                                   for p, ax in ((i64(1, 2, 2, 0), None), (i64(-1, 5, 1, -2), None),
                                                 (i64(2, 7), i64(-1)))
                                   for v in ((np.array(2.5, np.float32),) if m == "constant" else (None,))],
        "tensor.expand": lambda rng: [(None, [f(rng, 3, 1), i64(2, 1, 4)], (1,)), (None, [f(rng, 3), i64(1)], (1,))],
        "tensor.tile": lambda rng: [(None, [f(rng, 2, 3), i64(2, 3)], (1,)), (None, [f(rng, 2, 3), i64(1, 0)], (1,))],
        "tensor.depth_to_space": lambda rng: [(A("tensor.depth_to_space", blocksize=2, mode=m), [f(rng, 2, 8, 3, 2)], ())
                                              for m in ("DCR", "CRD")],
        "tensor.space_to_depth": lambda rng: [(A("tensor.space_to_depth", blocksize=2, mode=m), [f(rng, 2, 3, 4, 6)], ())
                                              for m in ("DCR", "CRD")],
        "tensor.reverse_sequence": lambda rng: [(A("tensor.reverse_sequence", batch_axis=b, time_axis=1 - b),
                                                 [f(rng, 4, 4, 2), i64(1, 4, 2, 3)], ()) for b in (0, 1)],
        "tensor.one_hot": lambda rng: [(A("tensor.one_hot", axis=a), [rand((2, 3), "int64", rng, -6, 6), i64(5),
                                                                      np.array([-1.0, 2.0], np.float32)], (1,))
                                       for a in (0, -1)],
        "tensor.trilu": lambda rng: [(A("tensor.trilu", upper=u), [f(rng, 2, 4, 5)] + ([i64(k)] if k is not None else []),
                                      (1,)) for u in (0, 1) for k in (None, -1, 2)],
        "tensor.eye_like": lambda rng: [(A("tensor.eye_like", k=k, dtype=d), [f(rng, 4, 5)], ())
                                        for k in (0, 2, -3) for d in (None, "int32")],
        "tensor.range": lambda rng: [(A("tensor.range"), [np.array(a, t), np.array(b, t), np.array(c, t)], (0, 1, 2))
                                     for a, b, c, t in ((1, 10, 3, np.int32), (0.5, -2.0, -0.7, np.float32), (5, 5, 1, np.int64))],
        "tensor.constant_of_shape": lambda rng: [(A("tensor.constant_of_shape", value=v), [i64(2, 3)], (0,))
                                                 for v in (None, np.array([7], np.int32), np.array([True]))],
        "tensor.shape": lambda rng: [(A("tensor.shape", start=s, end=e), [f(rng, 2, 3, 5)], ()) for s, e in ((0, None), (1, -1))],
        "tensor.size": lambda rng: [(None, [f(rng, 2, 3, 5)], ())],
        "tensor.top_k": lambda rng: [(A("tensor.top_k", axis=a, largest=lg), [rand((3, 6), "float32", rng), i64(k)], ())
                                     for a in (-1,) for lg in (0, 1) for k in (1, 3)],
        "tensor.unique": lambda rng: [(A("tensor.unique", axis=ax, sorted=s), [rand((4, 3), "int32", rng, 0, 2)], ())
                                      for ax in (None, 0) for s in (0, 1)],
        "tensor.non_zero": lambda rng: [(None, [rand((3, 4), "int32", rng, 0, 1)], ())],
        "vision.non_max_suppression": lambda rng: [
            (A("vision.non_max_suppression"), [np.sort(f(rng, 1, 6, 4), axis=-1), np.abs(f(rng, 1, 2, 6)),
                                               i64(3), np.array([0.3], np.float32), None], ())],
    }


TENSOR_CASES = _cases
