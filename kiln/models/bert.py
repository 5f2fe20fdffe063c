"""A BERT-style encoder with random fixed-seed weights, written with the primitive ops an exporter
emits (MatMul/Reshape/Transpose/Softmax, GELU through Erf, LayerNormalization) rather than a fused
Attention op, so the compiler sees the real shape of a transformer."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from kiln.errors import KilnError
from kiln.models.onnx_builder import GraphBuilder


def layer_norm(g: GraphBuilder, x: str, hidden: int, name: str) -> str:
    gamma = g.uniform(f"{name}.gamma", (hidden,), 0.8, 1.2)
    beta = g.weight(f"{name}.beta", (hidden,), 0.05)
    return g.node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-12)


def linear(g: GraphBuilder, x: str, cin: int, cout: int, name: str) -> str:
    w = g.weight(f"{name}.weight", (cin, cout), (1.0 / cin) ** 0.5)
    y = g.node("MatMul", [x, w], f"{name}.matmul")
    return g.node("Add", [y, g.weight(f"{name}.bias", (cout,), 0.02)], name)


def attention(g: GraphBuilder, x: str, hidden: int, heads: int, name: str) -> str:
    hd = hidden // heads
    split = g.const(f"{name}.split_shape", np.array([0, 0, heads, hd], np.int64))
    q, k, v = (g.node("Reshape", [linear(g, x, hidden, hidden, f"{name}.{p}"), split], f"{name}.{p}.heads")
               for p in "qkv")
    q = g.node("Transpose", [q], f"{name}.q.t", perm=[0, 2, 1, 3])  # [B, heads, S, hd]
    k = g.node("Transpose", [k], f"{name}.k.t", perm=[0, 2, 3, 1])  # [B, heads, hd, S]
    v = g.node("Transpose", [v], f"{name}.v.t", perm=[0, 2, 1, 3])
    scores = g.node("MatMul", [q, k], f"{name}.scores")
    scale = g.const(f"{name}.scale", np.array(1.0 / np.sqrt(hd), np.float32))
    scores = g.node("Mul", [scores, scale], f"{name}.scaled")
    probs = g.node("Softmax", [scores], f"{name}.probs", axis=-1)
    ctx = g.node("MatMul", [probs, v], f"{name}.context")
    ctx = g.node("Transpose", [ctx], f"{name}.context.t", perm=[0, 2, 1, 3])
    merge = g.const(f"{name}.merge_shape", np.array([0, 0, hidden], np.int64))
    ctx = g.node("Reshape", [ctx, merge], f"{name}.merged")
    return linear(g, ctx, hidden, hidden, f"{name}.out")


def gelu(g: GraphBuilder, x: str, name: str) -> str:
    """The exact GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt 2))."""
    inv_sqrt2 = g.const(f"{name}.inv_sqrt2", np.array(1 / np.sqrt(2.0), np.float32))
    one = g.const(f"{name}.one", np.array(1.0, np.float32))
    half = g.const(f"{name}.half", np.array(0.5, np.float32))
    e = g.node("Erf", [g.node("Mul", [x, inv_sqrt2], f"{name}.scaled")], f"{name}.erf")
    y = g.node("Mul", [x, g.node("Add", [e, one], f"{name}.plus1")], f"{name}.mul")
    return g.node("Mul", [y, half], name)


def bert(layers: int = 6, hidden: int = 384, heads: int = 12, seq: int = 128, vocab: int = 30522,
         seed: int = 0, batch: int | str = "N") -> onnx.ModelProto:
    """input_ids [batch, seq] int64 -> last hidden state [batch, seq, hidden]."""
    if hidden % heads:
        raise KilnError(f"bert: hidden size {hidden} is not a multiple of the head count {heads}")
    g = GraphBuilder(seed)
    words = g.weight("embeddings.word", (vocab, hidden), 0.5)
    positions = g.weight("embeddings.position", (seq, hidden), 0.1)
    token_type = g.weight("embeddings.token_type", (hidden,), 0.1)
    x = g.node("Gather", [words, "input_ids"], "embeddings.gather", axis=0)
    x = g.node("Add", [x, positions], "embeddings.add_position")
    x = g.node("Add", [x, token_type], "embeddings.add_token_type")
    x = layer_norm(g, x, hidden, "embeddings.norm")
    for i in range(layers):
        name = f"layer{i}"
        a = attention(g, x, hidden, heads, f"{name}.attention")
        x = layer_norm(g, g.node("Add", [x, a], f"{name}.attention.residual"), hidden, f"{name}.attention.norm")
        h = gelu(g, linear(g, x, hidden, 4 * hidden, f"{name}.ffn.up"), f"{name}.ffn.gelu")
        h = linear(g, h, 4 * hidden, hidden, f"{name}.ffn.down")
        x = layer_norm(g, g.node("Add", [x, h], f"{name}.ffn.residual"), hidden, f"{name}.ffn.norm")
    g.node("Identity", [x], "last_hidden_state")
    return g.model("kiln_bert",
                   [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])],
                   [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])])


def bert_tiny(seed: int = 0, batch: int | str = "N", seq: int = 16) -> onnx.ModelProto:
    """2 layers, hidden 64, 4 heads, vocab 1000: the same graph shape, fast enough for every test run."""
    return bert(layers=2, hidden=64, heads=4, seq=seq, vocab=1000, seed=seed, batch=batch)
