"""Irregular networks for the memory-ordering tests: random-wiring graphs (Xie et al. 2019, Watts-Strogatz
wiring) and cell-based NAS-style networks (DARTS-like cells), as ONNX models that Kiln compiles and runs.

Their branches join through concatenations of tensors of different sizes, so the order in which
branches run changes the peak of live bytes (SERENITY's case): the plain topological order is often
far from the minimum. Each generator also gives the same wiring as abstract steps
(kiln.compiler.memory_plan.Step) for searches too small or too many to compile.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from kiln.compiler.memory_plan import Step
from kiln.models.onnx_builder import GraphBuilder

CHANNELS = (4, 8, 16, 32)


def watts_strogatz(seed: int, nodes: int, k: int = 4, p: float = 0.75) -> list[list[int]]:
    """Predecessors of each node of a WS ring lattice (k neighbours, rewired with probability p),
    edges oriented from the lower index to the higher one: a DAG in index order."""
    rng = np.random.default_rng(seed)
    edges: set[tuple[int, int]] = set()
    for i in range(nodes):
        for d in range(1, k // 2 + 1):
            j = (i + d) % nodes
            free = [m for m in range(nodes) if m != i and (min(i, m), max(i, m)) not in edges]
            if rng.random() < p and free:
                j = free[int(rng.integers(len(free)))]
            edges.add((min(i, j), max(i, j)))
    preds: list[list[int]] = [[] for _ in range(nodes)]
    for a, b in sorted(edges):
        preds[b].append(a)
    return preds


def nas_cells(seed: int, cells: int, nodes: int = 4) -> list[list[int]]:
    """Predecessors of each node of stacked cells: a cell's two inputs are the outputs of the two cells
    before; each of its nodes combines two earlier states of the cell; its output concatenates them."""
    rng = np.random.default_rng(seed)
    preds: list[list[int]] = [[]]  # node 0: the stem
    outs = [0, 0]
    for _ in range(cells):
        states = [len(preds), len(preds) + 1]
        preds += [[outs[-2]], [outs[-1]]]  # the two 1x1 preprocessing convs
        for _ in range(nodes):
            a, b = rng.choice(len(states), 2, replace=False)
            preds.append(sorted({states[a], states[b]}))
            states.append(len(preds) - 1)
        preds.append(states[2:])
        outs.append(len(preds) - 1)
    return preds


def channels_for(seed: int, preds: list[list[int]]) -> list[int]:
    rng = np.random.default_rng(seed + 1)
    return [int(rng.choice(CHANNELS)) for _ in preds]


def dag_model(preds: list[list[int]], channels: list[int], seed: int = 0, size: int = 8,
              in_channels: int = 3) -> onnx.ModelProto:
    """Each node concatenates its predecessors (or reads the input) and applies Conv 1x1 + Relu with its own
    width; the nodes no one reads are concatenated into the output."""
    g = GraphBuilder(seed)
    names: list[str] = []
    width: list[int] = []
    for i, ps in enumerate(preds):
        srcs = [names[p] for p in ps] or ["input"]
        cin = sum(width[p] for p in ps) if ps else in_channels
        x = srcs[0] if len(srcs) == 1 else g.node("Concat", srcs, f"n{i}.cat", axis=1)
        w = g.weight(f"n{i}.weight", (channels[i], cin, 1, 1))
        b = g.weight(f"n{i}.bias", (channels[i],), 0.1)
        y = g.node("Conv", [x, w, b], f"n{i}.conv")
        names.append(g.node("Relu", [y], f"n{i}"))
        width.append(channels[i])
    read = {p for ps in preds for p in ps}
    sinks = [i for i in range(len(preds)) if i not in read]
    out = names[sinks[0]] if len(sinks) == 1 else g.node("Concat", [names[i] for i in sinks], "out", axis=1)
    shape = [1, sum(width[i] for i in sinks), size, size]
    return g.model("irregular_dag", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                   [1, in_channels, size, size])],
                   [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)])


def dag_steps(preds: list[list[int]], channels: list[int], size: int = 8) -> tuple[list[Step], dict[str, int]]:
    """The same network as kernel steps: a concatenation step where a node has several predecessors, a
    conv step per node (float32 bytes); the input is external and the sinks' concatenation the output."""
    steps: list[Step] = []
    sizes: dict[str, int] = {}
    plane = size * size * 4
    for i, ps in enumerate(preds):
        src = f"y{ps[0]}" if len(ps) == 1 else "input"
        if len(ps) > 1:
            src = f"cat{i}"
            steps.append(Step(f"cat{i}", tuple(f"y{p}" for p in ps), (src,)))
            sizes[src] = sum(channels[p] for p in ps) * plane
        steps.append(Step(f"conv{i}", (src,), (f"y{i}",)))
        sizes[f"y{i}"] = channels[i] * plane
    read = {p for ps in preds for p in ps}
    steps.append(Step("out", tuple(f"y{i}" for i in range(len(preds)) if i not in read), ("out",)))
    return steps, sizes
