"""ONNX's node tests of the op families models are made of, imported in three views.

Each case of a fixed list of op families is imported as generated (``given``), without its
declared shapes (``undeclared``) and without ONNX's shape inference too (``rules``); see
``onnx_conformance_cases``. No view may give a shape or type that differs from ONNX's
reference outputs (``wrong``) or escape with an error that is not ours (``internal``), and
the given view must reproduce ONNX's shapes wherever it imports. Refusals are allowed: they
are what the benchmark (``benchmarks/onnx_conformance.py``) counts over all 1,884 cases;
but the ops ONNX defines by function bodies listed here must import (by expansion). A few
families whose operands the node tests give as graph inputs are also planned: each case
plans, or is refused naming such an input.
"""

from __future__ import annotations

import onnx
import onnx_conformance_cases as judge
import pytest

#: The main op types whose node tests run here: the families models are made of.
FAMILIES = frozenset({
    "MatMul", "Gemm", "Einsum",
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Relu", "Sigmoid", "Tanh", "Gelu",
    "Clip", "Where", "Cast",
    "Reshape", "Transpose", "Slice", "Concat", "Split", "Expand", "Flatten", "Squeeze",
    "Unsqueeze", "Pad", "Tile", "Gather",
    "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization",
    "Conv", "ConvTranspose", "AveragePool", "MaxPool", "GlobalAveragePool", "GlobalMaxPool",
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
    "LSTM", "GRU", "RNN", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
    "CumProd", "ReverseSequence", "RoiAlign", "GridSample", "MaxUnpool", "Det",
} | {
    # ops ONNX defines by function bodies, imported as the ops of their bodies
    # (``frontends/onnx_functions.py``); their ``_expanded`` cases are ONNX's own expansion
    "Attention", "RMSNormalization", "RotaryEmbedding", "GroupNormalization",
    "SoftmaxCrossEntropyLoss", "MeanVarianceNormalization", "SwiGLU",
})
#: Families the registry has no rules for, which must import by expansion in every view.
EXPANDED = frozenset({"Attention", "RMSNormalization", "RotaryEmbedding",
                      "GroupNormalization", "SoftmaxCrossEntropyLoss",
                      "MeanVarianceNormalization", "SwiGLU"})

CASES = [case for case in judge.conformance_cases() if case.op_type in FAMILIES]


def _params() -> list:
    return [pytest.param(case, view, id=f"{case.name}-{view}")
            for case in CASES for view in judge.VIEWS]


@pytest.mark.parametrize(("case", "view"), _params())
def test_node_case_matches_onnx(case: judge.ConformanceCase, view: str) -> None:
    outcome, _ = judge.import_case(case, view)
    assert outcome.outcome not in (judge.WRONG, judge.INTERNAL), outcome.detail
    if view == "given":
        assert outcome.outcome != judge.UNKNOWN, outcome.detail
    if case.op_type in EXPANDED:
        assert outcome.outcome != judge.REFUSED_OP, outcome.detail


def test_families_are_covered() -> None:
    """Every listed family has node tests (a renamed op would silently test nothing)."""
    assert {case.op_type for case in CASES} == FAMILIES


#: Families whose shape-deciding operands (axes, sizes, starts) the node tests give as graph
#: inputs: each case plans, or is refused naming only such an input.
PLANNED_FAMILIES = frozenset({"ReduceSum", "ReduceMean", "ReduceL2", "Split", "Slice"})


@pytest.mark.parametrize("case", [case for case in CASES if case.op_type in PLANNED_FAMILIES],
                         ids=lambda case: case.name)
def test_node_case_plans_or_names_the_input_deciding_it(case: judge.ConformanceCase) -> None:
    """Planned, or a DynamicShapeError naming graph inputs, each an integer operand (axes,
    sizes, starts), never the data whose values no shape depends on."""
    _, ir = judge.import_case(case, "given")
    assert ir is not None
    planned = judge.plan_case(ir)
    if planned.outcome == judge.PLANNED:
        return
    assert planned.outcome == "DynamicShapeError", planned.detail
    types = {value.name: value.type.tensor_type.elem_type for value in case.model.graph.input}
    named = [name for name in types if f"'{name}'" in planned.detail]
    assert named, planned.detail
    integers = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    assert all(types[name] in integers for name in named), planned.detail
