"""A small transformer block built with the Builder: the quick model of tests that plan a
whole session many times.

It plans in well under a second while holding every layout question the planner answers:
an embedding table (a sliceable creator), Q/K/V and output projections (matmul operands
reached through reshapes and transposes), biases (broadcast operands), residual adds, a
layer norm and an MLP. Inference only (no loss, no backward pass).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from popart_unwind.frontends.builder import Builder
from popart_unwind.ir import Ir


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Sizes of the block (the defaults plan in well under a second)."""

    batch: int = 2
    sequence: int = 16
    hidden: int = 64
    heads: int = 4
    mlp: int = 256
    vocabulary: int = 128


def transformer_block_ir(sizes: BlockSizes = BlockSizes(), seed: int = 0) -> Ir:
    """The transformer block as an Ir (weights drawn from a fixed seed)."""
    rng = np.random.default_rng(seed)
    b, s, h, n = sizes.batch, sizes.sequence, sizes.hidden, sizes.heads
    d = h // n

    def weight(name: str, *shape: int) -> str:
        scale = 1.0 / np.sqrt(shape[0])
        return builder.add_initialized_input_tensor(
            (rng.standard_normal(shape) * scale).astype(np.float32), name)

    def bias(name: str, size: int) -> str:
        return builder.add_initialized_input_tensor(np.zeros(size, np.float32), name)

    def shape_of(*dims: int) -> np.ndarray:
        return np.array(dims, dtype=np.int64)

    builder = Builder()
    onnx = builder.ai_onnx
    tokens = builder.add_input_tensor("int64", (b, s), "tokens")
    table = weight("embedding", sizes.vocabulary, h)
    x = onnx.gather([table, tokens], axis=0, name="embed")

    def heads(projected: str, perm: list[int]) -> str:
        split = onnx.reshape([projected, shape_of(b, s, n, d)])
        return onnx.transpose([split], perm=perm)

    with builder.name_scope("attention"):
        q = heads(onnx.matmul([x, weight("wq", h, h)], name="q"), [0, 2, 1, 3])
        k = heads(onnx.matmul([x, weight("wk", h, h)], name="k"), [0, 2, 3, 1])
        v = heads(onnx.matmul([x, weight("wv", h, h)], name="v"), [0, 2, 1, 3])
        scores = onnx.matmul([q, k], name="scores")
        scaled = onnx.mul([scores, np.array(1.0 / np.sqrt(d), np.float32)], name="scale")
        probs = onnx.softmax([scaled], axis=-1)
        context = onnx.matmul([probs, v], name="context")
        merged = onnx.reshape([onnx.transpose([context], perm=[0, 2, 1, 3]),
                               shape_of(b, s, h)])
        projected = onnx.add([onnx.matmul([merged, weight("wo", h, h)], name="out"),
                              bias("bo", h)], name="out_bias")
        residual = onnx.add([x, projected], name="residual")
    with builder.name_scope("norm"):
        normed = onnx.layer_normalization(
            [residual, builder.add_initialized_input_tensor(np.ones(h, np.float32), "gamma"),
             bias("beta", h)], axis=-1, epsilon=1e-5)
    with builder.name_scope("mlp"):
        hidden = onnx.add([onnx.matmul([normed, weight("w1", h, sizes.mlp)]),
                           bias("b1", sizes.mlp)])
        activated = onnx.gelu([hidden])
        out = onnx.add([onnx.matmul([activated, weight("w2", sizes.mlp, h)]), bias("b2", h)])
        result = onnx.add([normed, out], name="residual")
    builder.add_output_tensor(result)
    ir = builder.ir()
    ir.metadata.update({"source": "transformer block (Builder)", "format": "builder"})
    return ir
