"""A DLRM-style recommendation model: a bottom MLP on dense features, one embedding table per sparse
feature (Gather), pairwise dot-product interaction (batched MatMul, the strictly lower triangle
gathered), and a top MLP with a sigmoid: memory-bound lookups beside small GEMMs."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from kiln.models.layers import tensor
from kiln.models.onnx_builder import GraphBuilder


def _mlp(g: GraphBuilder, x: str, sizes: tuple[int, ...], name: str, last_relu: bool) -> str:
    for i, (cin, cout) in enumerate(zip(sizes, sizes[1:])):
        w, b = g.weight(f"{name}{i}.weight", (cout, cin)), g.weight(f"{name}{i}.bias", (cout,), 0.01)
        x = g.node("Gemm", [x, w, b], f"{name}{i}", transB=1)
        if last_relu or i < len(sizes) - 2:
            x = g.node("Relu", [x], f"{name}{i}.relu")
    return x


def _interaction(g: GraphBuilder, vectors: list[str], dim: int) -> str:
    """Dot products of every pair of feature vectors: [batch, n * (n - 1) / 2]."""
    n = len(vectors)
    axis = g.const("interact.axis", np.array([1], np.int64))
    stacked = g.node("Concat", [g.node("Unsqueeze", [v, axis], f"{v}.row") for v in vectors], "interact.stack",
                     axis=1)
    dots = g.node("MatMul", [stacked, g.node("Transpose", [stacked], "interact.t", perm=[0, 2, 1])], "interact.dots")
    flat = g.node("Reshape", [dots, g.const("interact.flat_shape", np.array([0, n * n], np.int64))], "interact.flat")
    lower = np.array([i * n + j for i in range(n) for j in range(i)], np.int64)
    return g.node("Gather", [flat, g.const("interact.lower", lower)], "interact.pairs", axis=1)


def dlrm(seed: int = 0, batch: int | str = 1, dense: int = 13, tables: int = 8, rows: int = 20000, dim: int = 64,
         bottom: tuple[int, ...] = (512, 256), top: tuple[int, ...] = (512, 256)) -> onnx.ModelProto:
    """dense [batch, dense] float, sparse [batch, tables] int64 (each id < rows) -> click probability [batch, 1]."""
    g = GraphBuilder(seed)
    vectors = [_mlp(g, "dense", (dense, *bottom, dim), "bottom", last_relu=True)]
    for t in range(tables):
        ids = g.node("Gather", ["sparse", g.const(f"emb{t}.column", np.array(t, np.int64))], f"emb{t}.ids", axis=1)
        vectors.append(g.node("Gather", [g.weight(f"emb{t}.table", (rows, dim), 0.1), ids], f"emb{t}", axis=0))
    x = g.node("Concat", [vectors[0], _interaction(g, vectors, dim)], "top.input", axis=1)
    pairs = (tables + 1) * tables // 2
    g.node("Sigmoid", [_mlp(g, x, (dim + pairs, *top, 1), "top", last_relu=False)], "probability")
    return g.model("kiln_dlrm", [tensor("dense", [batch, dense]), tensor("sparse", [batch, tables], TensorProto.INT64)],
                   [tensor("probability", [batch, 1])])
