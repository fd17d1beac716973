"""``computed_layouts`` without costing gives the layouts the full cost walk gives."""

from __future__ import annotations

import numpy as np
from popart_unwind.transforms import run_pipeline

from popart_unwind.baselines import linear_plan
from popart_unwind.cost import computed_layouts
from popart_unwind.cost.walk import _Recording
from popart_unwind.ops import REGISTRY
from popart_unwind.report.demo_model import build_demo_ir
from popart_unwind.target import IpuModel, TileTarget


def test_the_layouts_alone_equal_the_cost_walks():
    ir = build_demo_ir()
    ir.options = ir.options.__class__(enable_unwind_layouts=False)
    run_pipeline(ir)
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    mappings = linear_plan(ir, target)
    wanted = {t.id for op in ir.main_graph.ops for t in op.outputs}
    fast = computed_layouts(ir, target, mappings, wanted)
    target.reset()
    walk = _Recording(ir, target, mappings, REGISTRY, ir.options.unwind_valuations, wanted)
    walk.report()
    assert fast.keys() == walk.found.keys() and len(fast) == len(wanted)
    for tensor_id, tiles in walk.found.items():
        np.testing.assert_array_equal(fast[tensor_id], tiles, err_msg=tensor_id)
