"""PopART's ai.graphcore Ctc and CtcBeamSearchDecoder (ops/graphcore_ctc.py): shapes and
types as PopART's CtcOp and CtcBeamSearchDecoderOp set them up, refusals of inputs they
refuse, and a model holding each planned end to end."""

from __future__ import annotations

import numpy as np
import pytest
from graphcore_models import graphcore_model, plan_end_to_end
from test_graphcore_ops import graphcore_op

from popart_unwind.errors import ShapeError
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import BARRIER

T, N, C, S = 6, 3, 5, 4


def _ctc_inputs(targets_dtype=np.uint32):
    return [np.zeros((T, N, C), np.float32), np.zeros((N, S), targets_dtype),
            np.full(N, T, np.uint32), np.full(N, S, np.uint32)]


@pytest.mark.parametrize(("reduction", "loss"), [("Mean", ()), ("Sum", ()), ("None", (N,))])
@pytest.mark.parametrize(("code", "dtype"), [(0, "float32"), (10, "float16")])
def test_ctc_shapes(reduction, loss, code, dtype):
    op = graphcore_op("Ctc", _ctc_inputs(), {"reduction": reduction, "blank": 0,
                                             "outDataType": code}, outputs=2)
    assert [(t.dtype, t.shape) for t in op.outputs] == [(dtype, loss), (dtype, (T, N, C))]
    assert REGISTRY.layout_rule(op) is BARRIER and REGISTRY.gradient_rule(op) is None


@pytest.mark.parametrize("inputs", [
    _ctc_inputs(np.int32),  # PopART's targets are uint32
    [np.zeros((T, N), np.float32), *_ctc_inputs()[1:]],
    [np.zeros((T, N, C), np.float32), np.zeros((N + 1, S), np.uint32), *_ctc_inputs()[2:]],
])
def test_ctc_refuses_what_popart_refuses(inputs):
    with pytest.raises(ShapeError):
        graphcore_op("Ctc", inputs, {"reduction": "Mean"}, outputs=2)


def test_beam_search_shapes():
    op = graphcore_op("CtcBeamSearchDecoder", [np.zeros((T, N, C), np.float16),
                                               np.full(N, T, np.uint32)],
                      {"blank": 0, "beam_width": 4, "top_paths": 2}, outputs=3)
    assert [(t.dtype, t.shape) for t in op.outputs] == [
        ("float16", (N, 2)), ("uint32", (N, 2)), ("uint32", (N, 2, T))]
    with pytest.raises(ShapeError):
        graphcore_op("CtcBeamSearchDecoder", [np.zeros((T, N, C), np.float16),
                                              np.full(N + 1, T, np.uint32)], {}, outputs=3)


@pytest.mark.parametrize("name", ["Ctc", "CtcBeamSearchDecoder"])
def test_a_model_holding_it_plans_end_to_end(name):
    inputs = {"lp": np.zeros((T, N, C), np.float32)}
    if name == "Ctc":
        weights = {"t": np.ones((N, S), np.uint32), "il": np.full(N, T, np.uint32),
                   "tl": np.full(N, S, np.uint32)}
        model = graphcore_model(name, inputs, {"reduction": "None", "blank": 0}, weights,
                                outputs=2)
    else:
        weights = {"dl": np.full(N, T, np.uint32)}
        model = graphcore_model(name, inputs, {"top_paths": 1}, weights, outputs=3)
    run = plan_end_to_end(model)
    assert run.costs["ours"].cycles > 0 and run.costs["popart"].cycles > 0
    assert any(name in label for label in run.ops_without_rule), run.ops_without_rule
