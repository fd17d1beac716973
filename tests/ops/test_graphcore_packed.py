"""PopART's ai.graphcore PackedDataBlock (ops/graphcore_packed.py): its callback imported
as a subgraph typed as PopART types it, the result's shape, values against a numpy oracle
that unpacks, runs the callback and packs one sequence at a time, the gather law of an
Identity callback, malformed ops refused naming the op, and a model planned end to end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from graphcore_models import graphcore_model, plan_end_to_end
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as oh
from onnx import numpy_helper

from popart_unwind import transforms
from popart_unwind.errors import IrError, ModelImportError
from popart_unwind.frontends.onnx_import import import_onnx
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.graphcore_packed import PackedDataBlockOp, reference_values
from popart_unwind.ops.layout_rule import BARRIER
from popart_unwind.options import SessionOptions
from popart_unwind.report.session import transform
from popart_unwind.rewrite import Rewriter

RNG = np.random.default_rng(11)


def _untyped(name: str) -> onnx.ValueInfoProto:
    return onnx.ValueInfoProto(name=name)


def relu_callback() -> onnx.GraphProto:
    return oh.make_graph([oh.make_node("Relu", ["s"], ["r"])], "relu_cb",
                         [_untyped("s")], [_untyped("r")])


def identity_callback() -> onnx.GraphProto:
    return oh.make_graph([oh.make_node("Identity", ["s"], ["r"])], "identity_cb",
                         [_untyped("s")], [_untyped("r")])


def matmul_add_callback(weight: np.ndarray) -> onnx.GraphProto:
    """r = s0 @ W + s1, W a Constant node of the callback."""
    nodes = [oh.make_node("Constant", [], ["w"], value=numpy_helper.from_array(weight, "w")),
             oh.make_node("MatMul", ["s0", "w"], ["m"]),
             oh.make_node("Add", ["m", "s1"], ["r"])]
    return oh.make_graph(nodes, "matmul_cb", [_untyped("s0"), _untyped("s1")], [_untyped("r")])


def packed_model(inputs: dict[str, np.ndarray], callback: onnx.GraphProto, maxima: list[int],
                 result_size: int, batch: int, then: str | None = None) -> onnx.ModelProto:
    return graphcore_model("PackedDataBlock", inputs, {
        "maxSequenceLengths": maxima, "resultSize": result_size, "callbackBatchSize": batch,
        "callback": callback}, then=then)


def the_op(model: onnx.ModelProto) -> PackedDataBlockOp:
    ir = import_onnx(model)
    (op,) = [op for op in ir.main_graph.ops if op.type.name == "PackedDataBlock"]
    return op


def u32(*values: int) -> np.ndarray:
    return np.array(values, np.uint32)


# -- the oracle: one sequence at a time, written apart from the op's batches -----------------
def oracle(data: list[np.ndarray], offsets: list[np.ndarray], lengths: list[np.ndarray],
           maxima: list[int], result_offsets: np.ndarray, result_lengths: np.ndarray,
           result_shape: tuple[int, ...], per_sequence) -> np.ndarray:
    """Each sequence n of every packed input cut out and zero-padded to its maximum,
    ``per_sequence`` applied to them (a callback whose rows do not mix across the batch),
    its first ``result_lengths[n]`` rows written at ``result_offsets[n]`` of a zeroed
    result."""
    result = np.zeros(result_shape, np.float32)
    for n in range(len(result_offsets)):
        padded = []
        for d, o, ln, m in zip(data, offsets, lengths, maxima, strict=True):
            rows = d[int(o[n]):int(o[n]) + int(ln[n])]
            padded.append(np.concatenate([rows, np.zeros((m - len(rows), *d.shape[1:]),
                                                         d.dtype)]))
        made = per_sequence(*padded)
        start, count = int(result_offsets[n]), int(result_lengths[n])
        result[start:start + count] = made[:count]
    return result


# -- import and shapes -------------------------------------------------------------------------
def test_callback_is_a_subgraph_typed_as_popart_types_it():
    data = RNG.standard_normal((12, 3)).astype(np.float32)
    inputs = {"d": data, "o": u32(0, 3, 5, 9), "l": u32(3, 2, 4, 3), "ro": u32(0, 4, 8, 12),
              "rl": u32(3, 2, 4, 3)}
    op = the_op(packed_model(inputs, relu_callback(), [4], 16, 2))
    (callback,) = op.called_graphs()
    assert (callback.inputs[0].dtype, callback.inputs[0].shape) == ("float32", (2, 4, 3))
    assert callback.outputs[0].shape == (2, 4, 3)
    assert (op.output(0).dtype, op.output(0).shape) == ("float32", (16, 3))
    assert REGISTRY.lookup(op).layout is BARRIER
    assert transforms.checks.call_site_violations(op.graph.ir) == []
    assert op.op_in_to_subgraph_in_index(callback, 0) == 0
    assert [op.op_in_to_subgraph_in_index(callback, i) for i in range(1, 5)] == [None] * 4
    assert op.subgraph_in_to_op_in_index(callback, 0) == 0


def test_result_shape_follows_the_callback_output():
    """A callback that changes the feature size: [B, M, H] @ [H, K] + [B, M, K]; the
    result is [resultSize, K] of the callback's type."""
    weight = RNG.standard_normal((3, 5)).astype(np.float32)
    inputs = {"d0": RNG.standard_normal((10, 3)).astype(np.float32), "o0": u32(0, 4),
              "l0": u32(4, 3), "d1": RNG.standard_normal((9, 5)).astype(np.float32),
              "o1": u32(2, 6), "l1": u32(4, 3), "ro": u32(0, 4), "rl": u32(4, 3)}
    op = the_op(packed_model(inputs, matmul_add_callback(weight), [4, 4], 7, 1))
    (callback,) = op.called_graphs()
    assert [t.shape for t in callback.inputs] == [(1, 4, 3), (1, 4, 5)]
    assert op.output(0).shape == (7, 5)


# -- values ------------------------------------------------------------------------------------
def test_values_against_a_numpy_oracle():
    weight = RNG.standard_normal((3, 5)).astype(np.float32)
    d0 = RNG.standard_normal((14, 3)).astype(np.float32)
    d1 = RNG.standard_normal((16, 5)).astype(np.float32)
    o0, l0 = u32(0, 4, 6, 11), u32(4, 2, 5, 3)
    o1, l1 = u32(12, 0, 5, 9), u32(4, 2, 3, 3)
    ro, rl = u32(13, 0, 4, 9), u32(3, 2, 5, 4)
    inputs = {"d0": d0, "o0": o0, "l0": l0, "d1": d1, "o1": o1, "l1": l1, "ro": ro, "rl": rl}
    op = the_op(packed_model(inputs, matmul_add_callback(weight), [5, 5], 17, 2))
    (got,) = reference_values(op, list(inputs.values()))
    want = oracle([d0, d1], [o0, o1], [l0, l1], [5, 5], ro, rl, (17, 5),
                  lambda s0, s1: s0 @ weight + s1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.dtype == np.float32


def test_relu_values_and_a_later_sequence_overwriting_an_earlier_one():
    data = RNG.standard_normal((9, 2)).astype(np.float32)
    o, ln = u32(0, 2, 5, 7), u32(2, 3, 2, 2)
    ro, rl = u32(0, 1, 6, 3), u32(2, 3, 2, 1)  # sequence 1 overwrites row 1 of sequence 0
    inputs = {"d": data, "o": o, "l": ln, "ro": ro, "rl": rl}
    op = the_op(packed_model(inputs, relu_callback(), [3], 8, 2))
    (got,) = reference_values(op, list(inputs.values()))
    want = oracle([data], [o], [ln], [3], ro, rl, (8, 2), lambda s: np.maximum(s, 0))
    np.testing.assert_array_equal(got, want)


def test_values_outside_what_popart_states_are_not_computed():
    data = np.ones((6, 2), np.float32)
    base = {"d": data, "o": u32(0, 3), "l": u32(3, 3), "ro": u32(0, 3), "rl": u32(3, 3)}
    op = the_op(packed_model(base, relu_callback(), [3], 6, 2))
    assert reference_values(op, list(base.values())) is not None
    for name, value in [("l", u32(4, 2)),     # longer than maxSequenceLengths
                        ("o", u32(0, 4)),     # past the end of the data
                        ("ro", u32(0, 5)),    # past the end of the result
                        ("l", u32(0, 3)),     # a zero length before a non-zero one
                        ("rl", u32(0, 3))]:
        changed = {**base, name: value}
        assert reference_values(op, list(changed.values())) is None, name
    assert reference_values(op, [data, None, *list(base.values())[2:]]) is None


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_an_identity_callback_gathers_the_sequences_onto_the_result_offsets(draw):
    """The law: with an Identity callback the op copies rows
    ``data[offsets[n] : offsets[n] + lengths[n]]`` to ``result[result_offsets[n] : ...]``
    (lengths equal), every other result row zero."""
    batch = draw.draw(st.integers(1, 3), "batch")
    runs = draw.draw(st.integers(1, 3), "runs")
    maximum = draw.draw(st.integers(1, 4), "maximum")
    count = batch * runs
    lengths = draw.draw(st.lists(st.integers(1, maximum), min_size=count, max_size=count))
    order = draw.draw(st.permutations(range(count)), "order in the data")
    gap = draw.draw(st.integers(0, 2), "rows between results")
    features = draw.draw(st.integers(1, 3), "features")
    offsets, at = [0] * count, 0
    for n in order:
        offsets[n], at = at, at + lengths[n]
    data = RNG.standard_normal((at, features)).astype(np.float32)
    result_offsets, at = [], 0
    for n in range(count):
        result_offsets.append(at)
        at += lengths[n] + gap
    size = at
    inputs = {"d": data, "o": u32(*offsets), "l": u32(*lengths), "ro": u32(*result_offsets),
              "rl": u32(*lengths)}
    op = the_op(packed_model(inputs, identity_callback(), [maximum], size, batch))
    assert op.output(0).shape == (size, features)
    (got,) = reference_values(op, list(inputs.values()))
    rows = np.concatenate([np.arange(o, o + ln) for o, ln in zip(offsets, lengths,
                                                                 strict=True)])
    targets = np.concatenate([np.arange(r, r + ln) for r, ln in zip(result_offsets, lengths,
                                                                    strict=True)])
    want = np.zeros((size, features), np.float32)
    want[targets] = data[rows]
    np.testing.assert_array_equal(got, want)


# -- malformed ops -----------------------------------------------------------------------------
GOOD = {"d": np.ones((6, 2), np.float32), "o": u32(0, 3), "l": u32(3, 3), "ro": u32(0, 3),
        "rl": u32(3, 3)}


@pytest.mark.parametrize(("inputs", "maxima", "batch", "words"), [
    (GOOD, [3, 3], 2, "maxSequenceLengths"),               # one per packed input
    (GOOD, [0], 2, "maxSequenceLengths"),                  # positive lengths
    (GOOD, [3], 0, "callbackBatchSize"),
    (GOOD, [3], 4, "multiple of callbackBatchSize"),        # 2 sequences, batches of 4
    ({**GOOD, "rl": u32(3, 3, 0)}, [3], 1, "one count per sequence"),
    ({k: v for k, v in GOOD.items() if k != "rl"}, [3], 2, "3N \\+ 2 inputs"),
    ({**GOOD, "o": np.zeros(2, np.float32)}, [3], 2, "1-D integers"),
])
def test_malformed_ops_are_refused_naming_the_op(inputs, maxima, batch, words):
    with pytest.raises(ModelImportError, match=f"PackedDataBlock.*{words}"):
        import_onnx(packed_model(inputs, relu_callback(), maxima, 6, batch))


def test_a_missing_callback_is_refused_naming_the_op():
    model = graphcore_model("PackedDataBlock", GOOD, {
        "maxSequenceLengths": [3], "resultSize": 6, "callbackBatchSize": 2}, then=None)
    with pytest.raises(IrError, match=r"PackedDataBlock.*'callback'"):
        import_onnx(model)


def test_a_callback_of_two_outputs_or_a_wrong_input_shape_is_refused():
    two = oh.make_graph([oh.make_node("Relu", ["s"], ["r"]), oh.make_node("Neg", ["s"], ["q"])],
                        "two", [_untyped("s")], [_untyped("r"), _untyped("q")])
    with pytest.raises(ModelImportError, match=r"PackedDataBlock.*one output"):
        import_onnx(packed_model(GOOD, two, [3], 6, 2))
    declared = oh.make_graph([oh.make_node("Relu", ["s"], ["r"])], "declared",
                             [oh.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [2, 4, 2])],
                             [_untyped("r")])
    with pytest.raises(ModelImportError, match=r"PackedDataBlock.*unpacked sequences"):
        import_onnx(packed_model(GOOD, declared, [3], 6, 2))


# -- keeping the call site in step, and planning ---------------------------------------------
def test_dropping_an_unread_packed_input_drops_its_three_op_inputs():
    reads_first = oh.make_graph([oh.make_node("Relu", ["s0"], ["r"])], "first",
                                [_untyped("s0"), _untyped("s1")], [_untyped("r")])
    inputs = {"d0": np.ones((6, 2), np.float32), "o0": u32(0, 3), "l0": u32(3, 3),
              "d1": np.ones((4, 5), np.float32), "o1": u32(0, 2), "l1": u32(2, 2),
              "ro": u32(0, 3), "rl": u32(3, 3)}
    op = the_op(packed_model(inputs, reads_first, [3, 2], 6, 2))
    (callback,) = op.called_graphs()
    transforms.helpers.remove_subgraph_input(callback, 1, Rewriter(REGISTRY))
    assert [t.id for t in op.inputs] == ["d0", "o0", "l0", "ro", "rl"]
    assert op.attributes["maxSequenceLengths"] == [3]
    assert transforms.checks.call_site_violations(op.graph.ir) == []
    op.graph.ir.verify()


def test_planned_end_to_end_as_a_barrier_its_callback_planned_too():
    inputs = {"d": RNG.standard_normal((12, 4)).astype(np.float32), "o": u32(0, 3, 5, 9),
              "l": u32(3, 2, 4, 3), "ro": u32(0, 4, 8, 12), "rl": u32(3, 2, 4, 3)}
    run = plan_end_to_end(packed_model(inputs, relu_callback(), [4], 16, 2, then="Relu"))
    assert run.ops_without_rule == {"ai.graphcore::PackedDataBlock": 1}
    for name in ("ours", "popart"):
        types = [row.type for row in run.costs[name].ops]
        assert types.count("Relu") == 2 and "PackedDataBlock" in types  # callback's Relu too
    planned = {(t.graph_id, t.tensor_id) for t in run.plan.tensors}
    assert any(graph_id.endswith("callback") and tensor_id == "s"
               for graph_id, tensor_id in planned)


def test_the_session_transforms_hold_their_checks_around_it():
    """With checking on, every transform must leave call sites in step with their callees:
    the callback's inputs and output differ in shape from the op's (stacked), which is no
    disagreement."""
    inputs = {"d": np.ones((12, 3), np.float32), "o": u32(0, 3, 5, 9), "l": u32(3, 2, 4, 3),
              "ro": u32(0, 4, 8, 12), "rl": u32(3, 2, 4, 3)}
    ir = import_onnx(packed_model(inputs, relu_callback(), [4], 16, 2, then="Relu"),
                     SessionOptions(check_transform_conditions=True))
    transform(ir)
    assert [op.type.name for op in ir.main_graph.ops] == ["PackedDataBlock", "Relu"]
    assert transforms.checks.call_site_violations(ir) == []
