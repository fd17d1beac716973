"""Ops that draw random numbers: Dropout's outputs per opset, and its fold outside training."""

from __future__ import annotations

import numpy as np
from op_building import build

from popart_unwind.ir import TensorType
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.shape_inference import infer_op


def test_dropout_outputs_a_bool_mask_and_folds_outside_training():
    op = build("Dropout", [(2, 3)], outputs=2, version=13)
    infer_op(op)
    assert [(t.dtype, t.shape) for t in op.outputs] == [("float32", (2, 3)), ("bool", (2, 3))]
    x, mask = REGISTRY.lookup(op).fold(op, [None])
    assert x is op.input(0) and mask.dtype == bool and mask.all()
    training = build("Dropout", [(2, 3), None, np.array(True)], version=13)
    infer_op(training)
    assert REGISTRY.lookup(training).fold(training, [None, None, np.array(True)]) is None
    assert training.input(2).tensor_type is TensorType.CONST
