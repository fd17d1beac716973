"""Ops Poplibs computes with a vertex of popnn's (Gelu, Swish) or with several vertices one
after another (a softmax, a norm): ``IpuModel.elementwise_cycles`` for popnn's
``NonLinearity1D``, re-derived here from the terms of Poplibs' estimate, and
``compound_cycles`` as the cost walk charges each op, with the reductions a softmax or a
norm runs (``TileMachine.reduce_cycles``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popart_unwind.cost import evaluate
from popart_unwind.ir import Builder
from popart_unwind.ir.op import ONNX_DOMAIN
from popart_unwind.machine.ipu_model import POPNN_NONLINEARITIES, WORKER_CONTEXTS
from popart_unwind.ops.elementwise import POPNN_OPERATIONS
from popart_unwind.ops.reduce import (
    NORM_PASSES,
    NORM_PASSES_WITHOUT_STATISTICS,
    NORM_REDUCTIONS,
    SOFTMAX_PASSES,
    SOFTMAX_REDUCTIONS,
)
from popart_unwind.target import IpuModel, TileTarget


def nonlinearity_oracle(elements: int, dtype: str, operation: str) -> int:
    """The supervisor's 9 cycles, then each worker: 20 cycles of set-up; if it has vectors,
    2 to warm the pipeline, the first vector's op, a loop cycle per further vector, 1, and
    the pipeline's last op; then its remainder checks and elements (3 cycles for float,
    4 for half, plus each odd element's op)."""
    half = dtype == "float16"
    first, loop = POPNN_NONLINEARITIES[operation][half]
    width = 4 if half else 2
    vectors, left = elements // width, elements % width
    mine = -(-vectors // WORKER_CONTEXTS)
    worker = 20 + ((2 + first + (mine - 1) * loop + 1 + first) if mine else 0)
    if half:
        worker += 4 + (2 + first if left >= 2 else 0) + (3 + first if left % 2 else 0)
    else:
        worker += 3 + (2 + first if left else 0)
    return 9 + WORKER_CONTEXTS * worker


@given(st.integers(1, 5000), st.sampled_from(["float32", "float16"]),
       st.sampled_from(sorted(POPNN_NONLINEARITIES)))
def test_a_nonlinearity_costs_popnns_estimate(elements, dtype, operation):
    assert IpuModel().elementwise_cycles(elements, dtype, operation) == \
        nonlinearity_oracle(elements, dtype, operation)


def test_a_worked_example_of_the_gelu_estimate():
    # two floats: one vector, on one worker: 20 + 2 + 10 + 0 + 1 + 10, and 3 for the
    # remainder checks, on each of the six workers, after the supervisor's 9
    assert IpuModel().elementwise_cycles(2, "float32", "GELU") == 9 + 6 * (20 + 23 + 3)


@given(st.integers(0, 5000), st.sampled_from(["float32", "float16"]),
       st.lists(st.sampled_from([None, "EXPONENT", "MAXIMUM", "GELU"]), min_size=1,
                max_size=6))
def test_vertices_in_turn_add_up_and_the_former_model_counts_one(elements, dtype, passes):
    model = IpuModel()
    assert model.compound_cycles(elements, dtype, tuple(passes)) == sum(
        model.elementwise_cycles(elements, dtype, operation) for operation in passes)
    former = IpuModel(vertex_costs=False)
    assert former.compound_cycles(elements, dtype, tuple(passes)) == -(-elements // (
        4 if dtype == "float16" else 2))


def _one_op_ir(op_type: str, domain: str | None, attributes: dict,
               extra_inputs: int = 0) -> tuple:
    b = Builder()
    x = b.add_input_tensor("float32", [16, 64], "x")
    params = [b.add_input_tensor("float32", [64], f"p{k}") for k in range(extra_inputs)]
    b.add_output_tensor(b.op(op_type, [x, *params], attributes or {},
                             domain=domain or ONNX_DOMAIN))
    return b.ir(), ["x", *(f"p{k}" for k in range(extra_inputs))]


@pytest.mark.parametrize(("op_type", "domain", "attributes", "params", "passes",
                          "reductions"), [
    ("Softmax", None, {"axis": -1}, 0, SOFTMAX_PASSES, SOFTMAX_REDUCTIONS),
    ("LogSoftmax", None, {"axis": -1}, 0, SOFTMAX_PASSES, SOFTMAX_REDUCTIONS),
    ("LayerNormalization", None, {"axis": -1}, 2, NORM_PASSES, NORM_REDUCTIONS),
    ("Gelu", None, {"approximate": "tanh"}, 0, ("GELU",), ()),
    ("Gelu", None, {}, 0, ("GELU_ERF",), ()),
    ("Gelu", "com.microsoft", {}, 0, ("GELU_ERF",), ()),
])
def test_the_walk_charges_each_vertex_in_turn(op_type, domain, attributes, params, passes,
                                              reductions):
    ir, names = _one_op_ir(op_type, domain, attributes, params)
    target = TileTarget(IpuModel(tiles_per_ipu=4))
    # everything on tile 0: the input's 1,024 elements are the busiest tile's, its 16 rows
    # of 64 the reductions' outputs and inputs side by side, nothing left for a second stage
    on_tile_0 = {("", "x"): np.zeros(16 * 64, np.int16),
                 **{("", name): np.zeros(64, np.int16) for name in names[1:]}}
    [row] = [r for r in evaluate(ir, target, on_tile_0).ops if r.type == op_type]
    assert row.compute_cycles == target.compound_cycles(16 * 64, "float32", passes) + sum(
        target.reduce_cycles(16, 64, "float32", operation, False) for operation in reductions)
    assert len(passes) == 1 or row.compute_cycles > target.elementwise_cycles(16 * 64,
                                                                              "float32")


def test_a_batch_norm_runs_the_statistics_vertices_only_in_training():
    assert len(NORM_PASSES) == 4 and len(NORM_PASSES_WITHOUT_STATISTICS) == 2
    for training, passes, reductions in ((0, NORM_PASSES_WITHOUT_STATISTICS, ()),
                                         (1, NORM_PASSES, NORM_REDUCTIONS)):
        b = Builder(opset=15)
        x = b.add_input_tensor("float32", [2, 8, 4, 4], "x")
        params = [b.add_input_tensor("float32", [8], name)
                  for name in ("scale", "bias", "mean", "var")]
        outputs = b.op("BatchNormalization", [x, *params], {"training_mode": training},
                       num_outputs=3 if training else 1)
        b.add_output_tensor(outputs[0] if training else outputs)
        ir = b.ir()
        target = TileTarget(IpuModel(tiles_per_ipu=4))
        mappings = {("", "x"): np.zeros(2 * 8 * 16, np.int16),
                    **{("", name): np.zeros(8, np.int16)
                       for name in ("scale", "bias", "mean", "var")}}
        [row] = [r for r in evaluate(ir, target, mappings).ops
                 if r.type == "BatchNormalization"]
        # per channel, 2 x 16 inputs all on tile 0: eight outputs of 32 inputs each, the
        # batch axis reduced with the innermost: side by side within each image
        assert row.compute_cycles == target.compound_cycles(2 * 8 * 16, "float32", passes) \
            + sum(target.reduce_cycles(8, 32, "float32", operation, False)
                  for operation in reductions)


def test_every_op_named_for_popnn_has_its_figures():
    assert set(POPNN_OPERATIONS.values()) <= set(POPNN_NONLINEARITIES)
    assert {"GELU", "GELU_ERF"} <= set(POPNN_OPERATIONS.values())
