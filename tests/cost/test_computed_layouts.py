"""``computed_layouts``: the tiles the cost walk gives a computed tensor under a plan."""

import numpy as np

from popart_unwind.cost import evaluate
from popart_unwind.cost.walk import computed_layouts
from popart_unwind.frontends.builder import Builder
from popart_unwind.machine import IpuModel, TileTarget


def test_a_producerless_tensor_laid_out_like_its_partner_removes_the_exchange():
    b = Builder()
    x = b.add_input_tensor(np.float32, (8, 16), "x")
    w = b.add_initialized_input_tensor(np.ones((16, 16), np.float32), "w")
    zeros = b.add_initialized_input_tensor(np.zeros((8, 16), np.float32), "zeros")
    y = b.ai_onnx.matmul([x, w])
    b.add_output_tensor(b.ai_onnx.add([y, zeros]))
    ir = b.ir()
    target = TileTarget(IpuModel(tiles_per_ipu=8))
    linear = {("", t.id): target.linear_tiles(t.shape, t.dtype)
              for t in ir.main_graph.producerless_tensors()}
    found = computed_layouts(ir, target, linear, {y})
    assert found[y].shape == (8 * 16,) and found[y].max() < 8
    add = next(op for op in ir.main_graph.ops if op.is_type("Add"))
    before = evaluate(ir, target, mappings=linear).op(add.id).exchange_bytes
    after = evaluate(ir, target, mappings={**linear, ("", "zeros"): found[y]}).op(add.id)
    assert after.exchange_bytes == 0 and before > 0
