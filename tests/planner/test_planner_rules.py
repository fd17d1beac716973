"""The layout rules one by one: view maps against numpy, exchange, agreement, creators."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_testing import build, programs, small_target, weight
from popart_unwind.transforms import plan_ir

from popart_unwind.frontends.builder import Builder
from popart_unwind.machine import ExchangeNeed, read_need
from popart_unwind.ops import REGISTRY
from popart_unwind.options import UnwindValuations
from popart_unwind.unwind.ops import unwind_chain

TARGET = small_target(8)


def single_op(name, inputs, attributes=None, num_outputs=1, shapes=((4, 6),)):
    """An Ir holding one op on weights of ``shapes`` (numpy arrays in ``inputs`` become
    constants; ints index the weights)."""
    b = Builder()
    weights = [weight(b, s, f"w{i}") for i, s in enumerate(shapes)]
    args = [weights[a] if isinstance(a, int) else a for a in inputs]
    outs = b.op(name, args, attributes or {}, num_outputs=num_outputs)
    for out in [outs] if isinstance(outs, str) else outs:
        b.add_output_tensor(out)
    ir = b.ir()
    [op] = [op for op in ir.main_graph.ops if op.type.name == name]
    return op, REGISTRY.layout_rule(op)


def applied(op, rule, arrays):
    """The rule's output layouts for input 'tiles' ``arrays`` (any ints), reshaped."""
    outs = rule.output_tiles(op, [None if a is None else a.reshape(-1) for a in arrays],
                             TARGET)
    return [o.reshape(t.shape) for o, t in zip(outs, op.outputs, strict=True)]


def arange(shape):
    return np.arange(int(np.prod(shape))).reshape(shape)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.data())
def test_slice_maps_elements_like_its_numpy_fold(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    step = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
    start = data.draw(st.integers(-shape[axis] - 1, shape[axis] + 1))
    end = data.draw(st.integers(-shape[axis] - 2, shape[axis] + 1))
    op, rule = single_op("Slice", [0, np.array([start]), np.array([end]), np.array([axis]),
                                   np.array([step])], shapes=[tuple(shape)])
    constants = [arange(shape)] + [t.data for t in op.inputs[1:]]
    [expected] = REGISTRY.lookup(op).fold(op, constants)  # numpy, ONNX clamping
    [out] = applied(op, rule, [arange(shape), None, None, None, None])
    assert np.array_equal(out, expected)


def test_transpose_reshape_expand_split_concat_map_like_numpy():
    x = arange((2, 3, 4))
    op, rule = single_op("Transpose", [0], {"perm": [2, 0, 1]}, shapes=[(2, 3, 4)])
    assert np.array_equal(applied(op, rule, [x])[0], x.transpose(2, 0, 1))
    op, rule = single_op("Reshape", [0, np.array([4, 6])], shapes=[(2, 3, 4)])
    assert np.array_equal(applied(op, rule, [x, None])[0], x.reshape(4, 6))
    op, rule = single_op("Expand", [0, np.array([5, 3, 1])], shapes=[(3, 1)])
    assert np.array_equal(applied(op, rule, [arange((3, 1)), None])[0],
                          np.broadcast_to(arange((3, 1)), (5, 3, 1)))
    op, rule = single_op("Split", [0, np.array([1, 3])], {"axis": 2}, num_outputs=2,
                         shapes=[(2, 3, 4)])
    parts = applied(op, rule, [x, None])
    assert np.array_equal(parts[0], x[:, :, :1]) and np.array_equal(parts[1], x[:, :, 1:])
    op, rule = single_op("Concat", [0, 1], {"axis": 1}, shapes=[(2, 3), (2, 5)])
    a, b = arange((2, 3)), arange((2, 5)) + 100
    assert np.array_equal(applied(op, rule, [a, b])[0], np.concatenate([a, b], axis=1))
    assert rule.input_slab(op, 1) == (1, 3, 8)
    slab = rule.popart_view(op, 1, 0).apply(b)  # input 1 fills columns 3..7 of the output
    assert np.array_equal(slab[:, 3:], b) and not slab[:, :3].any()


def carried_back(chain, out_tiles):
    """Input tiles that ``chain`` takes to ``out_tiles`` (-1 where no output reads them)."""
    shifted = np.asarray(out_tiles).reshape(chain.out_shape) + 1
    return unwind_chain(chain).apply(shifted).reshape(-1) - 1


def test_a_views_element_map_carries_a_wanted_output_layout_back_exactly():
    op, rule = single_op("Slice", [0, np.array([1]), np.array([6]), np.array([1]),
                                   np.array([2])], shapes=[(4, 6)])
    wanted = np.arange(12) % 5
    inputs = carried_back(rule.popart_view(op, 0, 0), wanted)
    assert (inputs == -1).sum() == 24 - 12  # elements the slice does not read
    filled = np.where(inputs < 0, 7, inputs)
    assert np.array_equal(rule.output_tiles(op, [filled, None, None, None, None], TARGET)[0],
                          wanted)
    op, rule = single_op("Transpose", [0], {"perm": [1, 0]}, shapes=[(4, 6)])
    wanted = np.arange(24) % 3
    back = carried_back(rule.popart_view(op, 0, 0), wanted)
    assert np.array_equal(rule.output_tiles(op, [back], TARGET)[0], wanted)


def test_read_need_counts_each_remote_element_once_per_tile():
    # A bias of 2 elements on tile 0, read by a 2x2 output whose second row is on tile 1.
    need = read_need(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.array([0, 0]),
                     element_bytes=4, num_tiles=3)
    assert need.received_bytes.tolist() == [0, 8, 0]
    assert need.regions.tolist() == [0, 1, 0]
    # Two separate runs from two source tiles count two regions.
    need = read_need(np.array([2, 2, 2]), np.array([0, 1, 2]), np.array([0, 1, 1]), 2, 3,
                     distinct=False)
    assert need.received_bytes.tolist() == [0, 0, 6] and need.regions.tolist() == [0, 0, 2]


def test_elementwise_exchange_and_agreement():
    op, rule = single_op("Add", [0, 1], shapes=[(4, 6), (6,)])
    full = np.repeat(np.arange(4), 6)  # row r on tile r
    bias = TARGET.broadcast_operand_tiles(full, (4, 6), (6,))
    [out] = rule.output_tiles(op, [full, bias], TARGET)
    assert np.array_equal(out, full)
    need = rule.exchange(op, [full, bias], [out], TARGET)
    # Every bias element lies on tile 0 (ties go to the lowest tile): rows 1..3 receive it.
    assert need.received_bytes.tolist()[:4] == [0, 24, 24, 24]
    values = UnwindValuations()
    score, bound = rule.agreement(op, [full, bias], TARGET, values)
    assert score == bound == values.bias * 6
    op, rule = single_op("Mul", [0, 1], shapes=[(4, 6), (4, 6)])
    score, bound = rule.agreement(op, [full, full[::-1].copy()], TARGET, values)
    assert bound == values.elementwise * 24 and score < bound
    assert rule.exchange(op, [full, full], [full], TARGET).received_bytes.sum() == 0
    assert rule.creates_input(op, 0) is None


def test_matmul_and_gather_rules():
    op, rule = single_op("MatMul", [0, 1], shapes=[(2, 5, 16), (2, 16, 8)])
    assert rule.dims(op) == (2, 5, 16, 8)
    assert rule.creates_input(op, 0) == rule.creates_input(op, 1) == 0
    lhs, rhs = (rule.wanted_input_tiles(op, i, TARGET) for i in (0, 1))
    values = UnwindValuations()
    score, bound = rule.agreement(op, [lhs, rhs], TARGET, values)
    assert score == bound == values.matmul * (2 * 5 * 16 + 2 * 16 * 8)
    assert isinstance(rule.exchange(op, [lhs, rhs], rule.output_tiles(op, [lhs, rhs], TARGET),
                                    TARGET), ExchangeNeed)
    op, rule = single_op("MatMul", [0, 1], shapes=[(3, 4), (2, 4, 5)])  # broadcast batch
    assert rule.dims(op) is None and rule.creates_input(op, 0) is None
    op, rule = single_op("Gather", [0, np.array([[3, 1]])], shapes=[(6, 16)])
    assert rule.creates_input(op, 0) == rule.creates_input(op, 1) == 1
    assert np.array_equal(rule.wanted_input_tiles(op, 1, TARGET), [0, 0])  # createIndicesTensor
    table = rule.wanted_input_tiles(op, 0, TARGET)
    assert rule.rows(op).tolist() == [3, 1]
    out = np.zeros(2 * 16, dtype=np.int64)  # the whole result on tile 0
    need = rule.exchange(op, [table, None], [out], TARGET)
    expected = np.count_nonzero(table.reshape(6, 16)[[3, 1]] != 0) * 4
    assert int(need.received_bytes[0]) == expected


@settings(max_examples=20, deadline=None)
@given(programs())
def test_rule_agreement_bounds_add_up_to_the_unwind_upper_bound(program):
    ir = build(program)
    result = plan_ir(ir, small_target(8), write=False)
    values = UnwindValuations()
    total = 0.0
    for op in ir.main_graph.ops:
        none = [None] * (max(op.input_map(), default=-1) + 1)
        total += REGISTRY.layout_rule(op).agreement(op, none, TARGET, values)[1]
    assert total == result.upper_bound


def test_a_partner_is_not_tied_to_an_expanded_layout():
    """Where(cond, Expand(g), zeros): the zeros are not laid out like the expanded g, which
    repeats each element of g along the new axis (a layout piled on g's few tiles); the
    result is computed where the zeros lie and reads g as a broadcast operand."""
    b = Builder()
    small = b.add_input_tensor("float32", (2, 1, 8), "g")
    cond = b.add_input_tensor("bool", (2, 16, 8), "cond")
    zeros = weight(b, (2, 16, 8), "zeros")
    shape = b.add_constant(np.array([2, 16, 8], np.int64), "shape")
    expanded = b.ai_onnx.expand([small, shape], name="expand")
    b.add_output_tensor(b.ai_onnx.where([cond, expanded, zeros], name="where"))
    ir = b.ir()
    target = small_target(16)
    plan = plan_ir(ir, target, write=False)
    tiles = {p.tensor_id: p.tiles for p in plan.tensors}
    expanded_tiles = np.broadcast_to(tiles["g"].reshape(2, 1, 8), (2, 16, 8)).reshape(-1)
    assert not np.array_equal(tiles["zeros"], expanded_tiles)
    # the tie between cond and zeros stays (both full-shape, neither expanded)
    np.testing.assert_array_equal(tiles["cond"], tiles["zeros"])
    where = next(op for op in ir.main_graph.ops if op.name == "where")
    rule = REGISTRY.layout_rule(where)
    score, bound = rule.agreement(where, [tiles["cond"], expanded_tiles, tiles["zeros"]],
                                  target, UnwindValuations())
    assert score == bound == UnwindValuations().elementwise * 2 * 16 * 8
