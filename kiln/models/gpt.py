"""A GPT-2-style decoder with random fixed-seed weights, written with the primitive ops an exporter
emits: pre-norm blocks, one QKV projection split into heads, a causal mask applied with Where before
the softmax, GELU in its tanh form spelled out with Pow and Tanh, and a language-model head. Next to
the BERT encoder it covers causal masking, Split and the tanh GELU."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from kiln.errors import KilnError
from kiln.models.onnx_builder import GraphBuilder


def _layer_norm(g: GraphBuilder, x: str, hidden: int, name: str) -> str:
    gamma = g.uniform(f"{name}.gamma", (hidden,), 0.8, 1.2)
    return g.node("LayerNormalization", [x, gamma, g.weight(f"{name}.beta", (hidden,), 0.05)], name,
                  axis=-1, epsilon=1e-5)


def _linear(g: GraphBuilder, x: str, cin: int, cout: int, name: str) -> str:
    y = g.node("MatMul", [x, g.weight(f"{name}.weight", (cin, cout), (1.0 / cin) ** 0.5)], f"{name}.matmul")
    return g.node("Add", [y, g.weight(f"{name}.bias", (cout,), 0.02)], name)


def _gelu_tanh(g: GraphBuilder, x: str, name: str) -> str:
    """0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), op by op."""
    c = {k: g.const(f"{name}.{k}", np.array(v, np.float32)) for k, v in
         (("three", 3.0), ("k", 0.044715), ("s", np.sqrt(2 / np.pi)), ("one", 1.0), ("half", 0.5))}
    cube = g.node("Mul", [g.node("Pow", [x, c["three"]], f"{name}.cube"), c["k"]], f"{name}.cubek")
    inner = g.node("Mul", [g.node("Add", [x, cube], f"{name}.sum"), c["s"]], f"{name}.inner")
    t = g.node("Add", [g.node("Tanh", [inner], f"{name}.tanh"), c["one"]], f"{name}.plus1")
    return g.node("Mul", [g.node("Mul", [x, c["half"]], f"{name}.halfx"), t], name)


def _attention(g: GraphBuilder, x: str, hidden: int, heads: int, seq: int, name: str) -> str:
    hd = hidden // heads
    qkv = _linear(g, x, hidden, 3 * hidden, f"{name}.qkv")
    split = g.const(f"{name}.split", np.array([hidden] * 3, np.int64))
    g.nodes.append(helper.make_node("Split", [qkv, split], [f"{name}.{p}" for p in "qkv"], name=f"{name}.split",
                                    axis=2))
    shape = g.const(f"{name}.heads_shape", np.array([0, seq, heads, hd], np.int64))
    q, k, v = (g.node("Transpose", [g.node("Reshape", [f"{name}.{p}", shape], f"{name}.{p}.heads")], f"{name}.{p}.t",
                      perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]) for p in "qkv")
    scores = g.node("Mul", [g.node("MatMul", [q, k], f"{name}.qk"),
                            g.const(f"{name}.scale", np.array(1 / np.sqrt(hd), np.float32))], f"{name}.scores")
    causal = g.const(f"{name}.causal", np.tril(np.ones((seq, seq), bool)))
    masked = g.node("Where", [causal, scores, g.const(f"{name}.neg_inf", np.array(-np.inf, np.float32))],
                    f"{name}.masked")
    ctx = g.node("MatMul", [g.node("Softmax", [masked], f"{name}.probs", axis=-1), v], f"{name}.context")
    ctx = g.node("Transpose", [ctx], f"{name}.context.t", perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.const(f"{name}.merge", np.array([0, seq, hidden], np.int64))], f"{name}.merged")
    return _linear(g, ctx, hidden, hidden, f"{name}.out")


def gpt(layers: int = 6, hidden: int = 384, heads: int = 6, seq: int = 128, vocab: int = 8192, seed: int = 0,
        batch: int | str = "N") -> onnx.ModelProto:
    """input_ids [batch, seq] int64 -> next-token logits [batch, seq, vocab]."""
    if hidden % heads:
        raise KilnError(f"gpt: hidden size {hidden} is not a multiple of the head count {heads}")
    g = GraphBuilder(seed)
    x = g.node("Gather", [g.weight("embeddings.word", (vocab, hidden), 0.5), "input_ids"], "embeddings.gather",
               axis=0)
    x = g.node("Add", [x, g.weight("embeddings.position", (seq, hidden), 0.1)], "embeddings.add_position")
    for i in range(layers):
        name = f"layer{i}"
        x = g.node("Add", [x, _attention(g, _layer_norm(g, x, hidden, f"{name}.norm1"), hidden, heads, seq,
                                         f"{name}.attention")], f"{name}.attention.residual")
        h = _gelu_tanh(g, _linear(g, _layer_norm(g, x, hidden, f"{name}.norm2"), hidden, 4 * hidden,
                                  f"{name}.ffn.up"), f"{name}.ffn.gelu")
        x = g.node("Add", [x, _linear(g, h, 4 * hidden, hidden, f"{name}.ffn.down")], f"{name}.ffn.residual")
    x = _layer_norm(g, x, hidden, "final_norm")
    g.node("MatMul", [x, g.weight("lm_head.weight", (hidden, vocab), (1.0 / hidden) ** 0.5)], "logits")
    return g.model("kiln_gpt",
                   [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, seq, vocab])])


def gpt_tiny(seed: int = 0, batch: int | str = "N", seq: int = 16) -> onnx.ModelProto:
    """2 layers, hidden 64, 4 heads, vocab 1000: the same graph shape, fast enough for every test run."""
    return gpt(layers=2, hidden=64, heads=4, seq=seq, vocab=1000, seed=seed, batch=batch)
