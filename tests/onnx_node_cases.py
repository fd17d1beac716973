"""ONNX's own backend node tests as oracles for our shape rules.

Each case is a one-node model (or its function expansion) with input data and the expected
outputs. ``import_alone`` imports a case the hard way: ONNX's shape inference unavailable and
the declared output shapes removed, so every shape comes from this package's rules.
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import onnx
from onnx.backend.test.case.test_case import TestCase
from onnx_conformance_cases import onnx_inference_unavailable, without_declared_shapes

from popart_unwind.ir import Ir


def node_cases(module: str) -> dict[str, TestCase]:
    """The cases made by ``onnx.backend.test.case.node.<module>``, by name.

    Importing one module runs its exports, which is far quicker than collecting all cases.
    """
    import onnx.backend.test.case.node as node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module(f"{node.__name__}.{module}")
        cases = getattr(node, "_NodeTestCases", None)
        if cases is None:
            cases = node.collect_testcases(None)
    return {case.name: case for case in cases}


def import_alone(model: onnx.ModelProto) -> Ir:
    """``model`` imported with our shape rules alone (no ONNX inference, no declared
    output shapes)."""
    with onnx_inference_unavailable():
        return Ir.from_onnx(without_declared_shapes(model))


def import_every_way(model: onnx.ModelProto) -> list[Ir]:
    """``model`` imported as it is, and with our shape rules alone."""
    return [Ir.from_onnx(model), import_alone(model)]


def expected_types(case: TestCase) -> list[tuple[str, tuple[int, ...]]]:
    """(numpy dtype name, shape) of each expected output of the case's first data set."""
    return [(str(np.asarray(value).dtype), tuple(np.shape(value)))
            for value in case.data_sets[0][1]]


def output_types(ir: Ir) -> list[tuple[str, tuple[int, ...] | None]]:
    """(dtype, shape) of each main-graph output, as the IR has them."""
    return [(tensor.dtype, tensor.shape) for tensor in ir.main_graph.outputs]
