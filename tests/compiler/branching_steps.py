"""A generator of branching step graphs (kiln.compiler.memory_plan.Step): forks, parallel chains of
uneven length, joins of two or three branches, outputs nobody reads, odd tensor sizes."""

from __future__ import annotations

import numpy as np

from kiln.compiler.memory_plan import Step


def branching_steps(seed: int, n: int = 24) -> tuple[list[Step], dict[str, int]]:
    """`n` steps in a topological order and the size of every tensor they write ("x" is external)."""
    rng = np.random.default_rng(seed)
    steps: list[Step] = []
    sizes: dict[str, int] = {}
    frontier = ["x"]  # values that the next steps may read
    for i in range(n):
        r = rng.random()
        if r < 0.25 or len(frontier) == 1:  # fork: a new branch from any value so far
            reads = [frontier[int(rng.integers(len(frontier)))]]
        elif r < 0.45:  # join two or three branches
            k = min(len(frontier), int(rng.integers(2, 4)))
            reads = [frontier[j] for j in rng.choice(len(frontier), size=k, replace=False)]
        else:  # extend the newest branch
            reads = [frontier[-1]]
        outs = [f"t{i}"] + ([f"t{i}b"] if rng.random() < 0.15 else [])
        for t in outs:
            sizes[t] = int(rng.choice([1, 7, 60, 64, 129, 1000, 4097]))
        steps.append(Step(f"s{i}", tuple(reads), tuple(outs)))
        frontier += outs
        if len(frontier) > 6:
            frontier.pop(int(rng.integers(1, len(frontier) - 2)))
    return steps, sizes
