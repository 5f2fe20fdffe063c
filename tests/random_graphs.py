"""A generator of random well-typed graphs over registered operators, for differential tests.

Shapes use 1 and primes and broadcast against each other; values are reused (shared
sub-expressions, branches and joins), some computations are duplicated (for CSE) and some
subgraphs are all-constant (for folding).
"""

from __future__ import annotations

import numpy as np

from kiln.ir import Constant, Expr, Function, IRModule, Tuple, Var
from kiln.ir.types import TensorType as TT
from kiln.op import get_op

DIMS = (1, 2, 3, 5, 7)
UNARY = ("nn.relu", "math.neg", "math.tanh", "nn.sigmoid", "math.abs", "nn.softsign")
BINARY = ("math.add", "math.sub", "math.mul", "math.max", "math.min")
REDUCE = ("reduce.sum", "reduce.mean", "reduce.max")


class RandomGraph:
    def __init__(self, seed: int, max_rank: int = 4):
        self.rng = np.random.default_rng(seed)
        self.max_rank = max_rank
        self.pool: list[Expr] = []

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = int(self.rng.integers(1, self.max_rank + 1)) if rank is None else rank
        return tuple(int(self.rng.choice(DIMS)) for _ in range(rank))

    def const(self, shape: tuple[int, ...]) -> Constant:
        return Constant((self.rng.standard_normal(shape) * 0.5).astype(np.float32))

    def pick(self) -> Expr:
        """A value from the pool, biased to recent ones (long chains) but reaching back (joins)."""
        n = len(self.pool)
        i = n - 1 - min(int(self.rng.geometric(0.4)) - 1, n - 1)
        return self.pool[i]

    def broadcast_partner(self, x: Expr) -> Expr:
        """A value or constant whose shape broadcasts with x's."""
        shape = x.type.shape
        for cand in reversed(self.pool[-6:]):
            if cand is not x and cand.type.shape == shape and self.rng.random() < 0.5:
                return cand
        kind = self.rng.integers(3)
        if kind == 0:
            return self.const(())
        if kind == 1 and shape:
            return self.const(tuple(d if self.rng.random() < 0.5 else 1 for d in shape))
        return self.const(tuple(shape[-int(self.rng.integers(1, len(shape) + 1)):]) if shape else ())

    def step(self) -> Expr:
        x = self.pick()
        shape = x.type.shape
        choice = self.rng.random()
        if choice < 0.3:
            return get_op(str(self.rng.choice(UNARY)))(x)
        if choice < 0.6:
            return get_op(str(self.rng.choice(BINARY)))(x, self.broadcast_partner(x))
        if choice < 0.68 and shape:
            axis = int(self.rng.integers(len(shape)))
            return get_op(str(self.rng.choice(REDUCE)))(x, Constant(np.array([axis], np.int64)),
                                                        keepdims=int(self.rng.integers(2)))
        if choice < 0.74 and len(shape) >= 2:
            perm = tuple(int(p) for p in self.rng.permutation(len(shape)))
            return get_op("tensor.transpose")(x, perm=perm)
        if choice < 0.8:
            return get_op("tensor.reshape")(x, Constant(np.array([-1], np.int64)))
        if choice < 0.86 and shape:
            k = shape[-1]
            m = int(self.rng.choice(DIMS))
            return get_op("linalg.mat_mul")(x, self.const((k, m)))
        if choice < 0.9 and shape:
            return get_op("reduce.softmax")(x, axis=int(self.rng.integers(len(shape))))
        if choice < 0.94 and len(shape) == 4:
            c = shape[1]
            o = int(self.rng.choice(DIMS))
            return get_op("nn.conv")(x, self.const((o, c, 1, 1)))
        if choice < 0.97:  # a duplicate of a recent computation: food for CSE
            return get_op("nn.relu")(x)
        a = self.const(shape)  # an all-constant subgraph: food for FoldConstant
        return get_op("math.add")(x, get_op("math.mul")(a, self.const(())))

    def function(self, steps: int) -> Function:
        params = [Var(f"x{i}", TT(self.shape(), "float32")) for i in range(int(self.rng.integers(1, 3)))]
        self.pool = list(params)
        for _ in range(steps):
            self.pool.append(self.step())
        outs = [self.pool[-1]]
        if self.rng.random() < 0.5 and len(self.pool) > len(params) + 2:
            outs.append(self.pool[int(self.rng.integers(len(params), len(self.pool) - 1))])
        return Function(tuple(params), Tuple(tuple(outs)) if len(outs) > 1 else outs[0])

    def feeds(self, fn: Function) -> dict[str, np.ndarray]:
        return {p.name: self.rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params}


def random_module(seed: int, steps: int = 12) -> tuple[IRModule, dict[str, np.ndarray]]:
    g = RandomGraph(seed)
    fn = g.function(steps)
    return IRModule({"main": fn}), g.feeds(fn)


