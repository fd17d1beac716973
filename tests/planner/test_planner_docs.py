"""docs/planner.md: its example prints what the page says, its rule table covers the rules."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from popart_unwind.transforms import plan_ir

from popart_unwind.frontends.builder import Builder
from popart_unwind.ir.op import OpType
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import BARRIER

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "planner.md").read_text()


def test_the_example_gives_what_the_page_shows():
    b = Builder()
    x = b.add_input_tensor("float32", [32, 64], "x")
    w = b.add_initialized_input_tensor(np.zeros((128, 32), np.float32), "w")
    wr = b.op("Reshape", [b.op("Transpose", [w], {"perm": [1, 0]}), np.array([64, 64])])
    y = b.op("MatMul", [x, wr])
    b.add_output_tensor(b.op("Add", [y, b.add_initialized_input_tensor(
        np.zeros(64, np.float32), "bias")]))
    ir = b.ir()
    plan = plan_ir(ir, TileTarget(IpuModel(tiles_per_ipu=16)))
    methods = {p.tensor_id: p.method for p in plan.tensors}
    assert methods == {"x": "unwound", "w": "unwound", "bias": "unwound",
                       "Constant___constant": "linear"}
    assert "through (64,64) -> Reshape(32,128) -> DimShuffle(1 0)" in \
        plan.tensor("", "w").explanation
    assert plan.objective == plan.upper_bound == 20608
    assert "objective 20608 of 20608" in PAGE
    assert str(ir.main_graph.tensor("bias").tile_mapping[:5])[:-1] in \
        PAGE.replace("…", "").replace(", ]", "]")


def test_every_modelled_op_type_is_in_the_rule_table():
    table = PAGE.split("## The rule table")[1].split("## Emission")[0]
    listed = set(re.findall(r"\b[A-Z][A-Za-z0-9]+\b", table))
    for domain, name in REGISTRY.names():
        rule = REGISTRY.lookup(OpType(domain, name)).layout
        if rule is BARRIER or rule.kind == "elementwise":
            continue  # barriers are "anything else"; elementwise ops are listed by family
        assert name in listed, name
