"""The PopART-modelled IR: ``Ir`` → ``Graph`` → ``Op`` / ``Tensor``.

The core (this package) knows structure only. What each op type means — shapes, folds,
canonicalization patterns, unwind rules, the classes of ops that run subgraphs — lives in
``popart_unwind.ops``; the front ends (ONNX, PyTorch, the ``Builder``) live in
``popart_unwind.frontends`` and reach the core through ``popart_unwind.doors``, loading on
first use, so that the core does not depend on them.
"""

from popart_unwind.doors import entry_point
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.ir import MAIN_GRAPH_ID, Ir
from popart_unwind.ir.op import (
    GRAPHCORE_DOMAIN,
    ONNX_DOMAIN,
    UNUSED_BATCH_SERIALIZED_PHASE,
    UNUSED_EXECUTION_PHASE,
    UNUSED_PIPELINE_STAGE,
    UNUSED_VGRAPH_ID,
    Op,
    OpSettings,
    OpType,
    SubgraphOp,
)
from popart_unwind.ir.tensor import Tensor, TensorType
from popart_unwind.ir.tile_mapping import TileMapping

__all__ = [
    "GRAPHCORE_DOMAIN", "MAIN_GRAPH_ID", "ONNX_DOMAIN", "UNUSED_BATCH_SERIALIZED_PHASE",
    "UNUSED_EXECUTION_PHASE", "UNUSED_PIPELINE_STAGE", "UNUSED_VGRAPH_ID", "Builder",
    "Graph", "Ir", "Op", "OpSettings", "OpType", "SubgraphOp", "Tensor",
    "TensorType", "TileMapping",
]


def __getattr__(name: str):
    if name == "Builder":  # provided by the front ends, which sit above the op definitions
        return entry_point("Builder")
    raise AttributeError(f"module 'popart_unwind.ir' has no attribute {name!r}")
