"""PopART-style transforms over the popart-unwind IR (installed as popart_unwind.transforms).

A transform changes the IR once, declaring the conditions it assumes, guarantees and
preserves (after PopART's transform notes); ``registry`` applies transforms by name, runs
the session's pipeline and, when asked, checks every declaration. This layer depends on the
library and never the other way round. See docs/transforms.md.
"""

from . import registry
from .auto_virtual_graph import AutoVirtualGraph
from .autodiff import Autodiff
from .base import ALL_CONDITIONS, Transform
from .canonicalize import Canonicalize
from .conditions import Condition, check_condition, check_conditions
from .decompose_grad_sum import DecomposeGradSum
from .explicit_recompute import ExplicitRecompute
from .infer_pipeline_stages import InferPipelineStages
from .infer_shapes import InferShapes
from .inter_ipu_copy import InterIpuCopy
from .merge_copies import MergeCopies
from .merge_duplicate_ops import MergeDuplicateOps
from .pipeline import Pipeline
from .prune import Prune
from .registry import run_pipeline
from .serialize_matmuls import SerializeMatMuls
from .split_by_memory import SplitByMemory
from .subgraph_outline import SubgraphOutline
from .unwind_layouts import UnwindLayouts, plan_ir

__all__ = [
    "ALL_CONDITIONS", "AutoVirtualGraph", "Autodiff", "Canonicalize", "Condition",
    "DecomposeGradSum", "ExplicitRecompute", "InferPipelineStages", "InferShapes",
    "InterIpuCopy",
    "MergeCopies", "MergeDuplicateOps", "Pipeline", "Prune",
    "SerializeMatMuls", "SplitByMemory", "SubgraphOutline", "Transform",
    "UnwindLayouts", "check_condition", "check_conditions", "plan_ir", "registry",
    "run_pipeline",
]
