"""Results made of weights alone: a transposed weight is the weight."""

import numpy as np

from popart_unwind.frontends.builder import Builder
from popart_unwind.ir.weights import is_weight_op, weight_derived, weights_read


def test_a_transposed_weight_is_its_weight_and_an_activation_is_none():
    b = Builder()
    x = b.add_input_tensor(np.float32, (4, 8), "x")
    w = b.add_initialized_input_tensor(np.ones((6, 8), np.float32), "w")
    scale = b.add_initialized_input_tensor(np.ones((6, 8), np.float32), "scale")
    wt = b.ai_onnx.transpose([b.ai_onnx.mul([w, scale])], perm=[1, 0])
    y = b.ai_onnx.matmul([b.ai_onnx.relu([x]), wt])
    b.add_output_tensor(y)
    graph = b.ir().main_graph
    schedule = graph.schedule()
    derived = weight_derived(schedule)
    assert sorted(t.id for t in derived[wt]) == ["scale", "w"]
    by_output = {op.outputs[0].id: op for op in schedule}
    assert is_weight_op(by_output[wt], derived)
    assert not is_weight_op(by_output[y], derived)
    assert sorted(t.id for t in weights_read(by_output[y], derived)) == ["scale", "w"]
    relu = next(op for op in schedule if op.is_type("Relu"))
    assert weights_read(relu, derived) == [] and not is_weight_op(relu, derived)
