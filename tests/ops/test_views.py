"""View ops: shape rules and folds agree with numpy; view patterns compose and vanish."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes
from onnx_node_cases import (
    expected_types,
    import_alone,
    import_every_way,
    node_cases,
    output_types,
)
from op_building import computing_ops, folded_to, passed_on_ids

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, OpSettings, OpType, Tensor, TensorType
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import canonicalize

shapes = st.lists(st.integers(1, 4), max_size=4).map(tuple)


def make(graph, name, inputs, attributes=None, *, version=13, outputs=1, settings=None):
    op = graph.create_op(OpType("ai.onnx", name, version), inputs, outputs, attributes,
                         settings)
    for tensor, (dtype, shape) in zip(op.outputs, REGISTRY.lookup(op).infer(op), strict=True):
        tensor.dtype, tensor.shape = dtype, tuple(shape)
    return op


def const(graph, array):
    return graph.add_constant(graph.unique_id("c"), np.asarray(array))


def ints(values):
    return np.array(values, dtype=np.int64)


def fold(op):
    inputs = op.input_map()
    constants = [inputs[i].data if i in inputs and inputs[i].tensor_type is TensorType.CONST
                 else None for i in range(max(inputs, default=-1) + 1)]
    return REGISTRY.lookup(op).fold(op, constants)


def check(op, expected):
    """infer gives numpy's shape, and folding the constant data gives numpy's values."""
    outputs = expected if isinstance(expected, list) else [expected]
    assert [t.shape for t in op.outputs] == [e.shape for e in outputs]
    folded = fold(op)
    for got, want in zip(folded, outputs, strict=True):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype
        assert np.array_equal(got, want)


def graph_with(array):
    graph = Ir().main_graph
    return graph, const(graph, array)


def graph_input(shape, dtype="float32"):
    ir = Ir()
    return ir, ir.main_graph, ir.main_graph.add_input("x", dtype, shape)


# -- shape rules and folds against numpy ------------------------------------------------------
@st.composite
def reshapes(draw):
    """A shape, a target with the same number of elements, using 0 and -1 at random."""
    factors = draw(st.lists(st.integers(1, 4), max_size=5))

    def grouped(items):
        cuts = sorted(draw(st.sets(st.integers(1, max(len(items) - 1, 1)))))
        bounds = [0, *[c for c in cuts if c < len(items)], len(items)]
        return tuple(int(np.prod(items[a:b])) for a, b in pairwise(bounds) if b > a)

    shape, target = grouped(factors), list(grouped(draw(st.permutations(factors))))
    for i in range(min(len(shape), len(target))):
        if target[i] == shape[i] and draw(st.booleans()):
            target[i] = 0
    if target and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = -1
    return shape, target


@given(reshapes())
def test_reshape_matches_numpy(case):
    shape, target = case
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    graph, x = graph_with(data)
    numpy_target = [shape[i] if d == 0 else d for i, d in enumerate(target)]
    check(make(graph, "Reshape", [x, const(graph, ints(target))]), data.reshape(numpy_target))


def test_reshape_allowzero_keeps_a_literal_zero():
    graph, x = graph_with(np.zeros((0, 3), np.float32))
    op = make(graph, "Reshape", [x, const(graph, ints([3, 0]))], {"allowzero": 1}, version=14)
    assert op.output(0).shape == (3, 0)
    with pytest.raises(ShapeError, match="cannot infer -1"):
        make(graph, "Reshape", [x, const(graph, ints([0, -1]))], {"allowzero": 1}, version=14)


def test_reshape_before_opset_5_reads_the_shape_attribute():
    graph, x = graph_with(np.arange(6, dtype=np.float32))
    check(make(graph, "Reshape", [x], {"shape": [3, -1]}, version=1),
          np.arange(6, dtype=np.float32).reshape(3, 2))


def test_reshape_to_a_wrong_size_names_the_op():
    graph, x = graph_with(np.zeros((2, 3), np.float32))
    with pytest.raises(ShapeError, match=r"Reshape#0.*cannot reshape \(2, 3\)"):
        make(graph, "Reshape", [x, const(graph, ints([4]))])


@given(shapes, st.data())
def test_transpose_matches_numpy(shape, data):
    array = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    perm = data.draw(st.none() | st.permutations(range(len(shape))))
    graph, x = graph_with(array)
    attributes = {} if perm is None else {"perm": list(perm)}
    check(make(graph, "Transpose", [x], attributes), np.transpose(array, perm))


@given(shapes, st.data())
def test_flatten_matches_numpy(shape, data):
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    axis = data.draw(st.integers(-len(shape), len(shape)))
    graph, x = graph_with(array)
    cut = axis + len(shape) if axis < 0 else axis  # ONNX: a negative axis counts from the back
    expected = array.reshape(int(np.prod(shape[:cut])), int(np.prod(shape[cut:])))
    check(make(graph, "Flatten", [x], {"axis": axis}), expected)


@pytest.mark.parametrize("name", ["test_flatten_negative_axis1", "test_flatten_negative_axis2",
                                  "test_flatten_negative_axis3", "test_flatten_negative_axis4",
                                  "test_flatten_axis2", "test_flatten_default_axis"])
def test_flatten_gives_the_shapes_of_onnx_node_tests(name):
    case = node_cases("flatten")[name]
    for ir in import_every_way(case.model):
        assert output_types(ir) == expected_types(case)


def test_flatten_with_a_negative_axis_folds_and_lays_out_as_numpy_reshapes():
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    graph, x = graph_with(array)
    op = make(graph, "Flatten", [x], {"axis": -1})
    check(op, array.reshape(6, 4))
    assert REGISTRY.lookup(op).layout.steps(op, 0) == [("reshape", (6, 4))]


@given(st.lists(st.sampled_from([1, 1, 2, 3]), max_size=5).map(tuple), st.data(),
       st.sampled_from([11, 13]))
def test_squeeze_matches_numpy(shape, data, version):
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    ones = [i for i, d in enumerate(shape) if d == 1]
    axes = data.draw(st.none() | st.lists(st.sampled_from(ones), unique=True) if ones
                     else st.none())
    graph, x = graph_with(array)
    if axes is None:
        op = make(graph, "Squeeze", [x], version=version)
    elif version < 13:
        op = make(graph, "Squeeze", [x], {"axes": [a - len(shape) for a in axes]},
                  version=version)
    else:
        op = make(graph, "Squeeze", [x, const(graph, ints(axes))])
    check(op, np.squeeze(array, axis=None if axes is None else tuple(axes)))


@given(shapes, st.data(), st.sampled_from([11, 13]))
def test_unsqueeze_matches_numpy(shape, data, version):
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    count = data.draw(st.integers(1, 3))
    rank = len(shape) + count
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=count, max_size=count,
                              unique_by=lambda a: a % rank))
    graph, x = graph_with(array)
    if version < 13:
        op = make(graph, "Unsqueeze", [x], {"axes": axes}, version=version)
    else:
        op = make(graph, "Unsqueeze", [x, const(graph, ints(axes))])
    check(op, np.expand_dims(array, tuple(axes)))


def test_squeezing_a_wide_axis_is_a_shape_error():
    graph, x = graph_with(np.zeros((2, 1), np.float32))
    with pytest.raises(ShapeError, match="cannot squeeze axis 0 of size 2"):
        make(graph, "Squeeze", [x, const(graph, ints([0]))])


@st.composite
def slices(draw):
    shape = draw(st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), unique=True, min_size=1))
    bounds = []
    for axis in axes:
        dim = shape[axis]
        step = draw(st.integers(-3, 3).filter(bool))
        start = draw(st.integers(-dim if step < 0 else -2 * dim - 2, 2 * dim + 2))
        end = draw(st.integers(-2 * dim - 2, 2 * dim + 2) | st.sampled_from(
            [2**63 - 1, -(2**63)]))
        bounds.append((start, end, step))
    negative_axes = draw(st.booleans())
    return shape, axes, bounds, negative_axes


@given(slices())
def test_slice_matches_numpy(case):
    shape, axes, bounds, negative_axes = case
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    graph, x = graph_with(array)
    starts, ends, steps = (ints([b[k] for b in bounds]) for k in range(3))
    axis_ids = ints([a - len(shape) if negative_axes else a for a in axes])
    op = make(graph, "Slice", [x, const(graph, starts), const(graph, ends),
                               const(graph, axis_ids), const(graph, steps)])
    index = [slice(None)] * len(shape)
    for axis, (start, end, step) in zip(axes, bounds, strict=True):
        index[axis] = slice(start, end, step)
    check(op, array[tuple(index)])


def test_slice_with_a_negative_step_clamps_start_as_onnx_says():
    # ONNX clamps a start below -dim to 0 when stepping down (numpy would give nothing)
    array = np.arange(5, dtype=np.float32)
    graph, x = graph_with(array)
    op = make(graph, "Slice", [x, const(graph, ints([-10])), const(graph, ints([-20])),
                               const(graph, ints([0])), const(graph, ints([-1]))])
    check(op, array[:1])


def test_slice_before_opset_10_reads_attributes():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    graph, x = graph_with(array)
    op = make(graph, "Slice", [x], {"starts": [1, -3], "ends": [3, 100]}, version=9)
    check(op, array[1:3, -3:100])


@given(shapes.filter(bool), st.data())
def test_concat_matches_numpy(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    graph = Ir().main_graph
    arrays = []
    for size in sizes:
        part = list(shape)
        part[axis] = size
        arrays.append(np.random.default_rng(size).normal(size=part).astype(np.float32))
    op = make(graph, "Concat", [const(graph, a) for a in arrays], {"axis": axis})
    check(op, np.concatenate(arrays, axis=axis))


@given(mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=3))
def test_expand_matches_numpy(case):
    shape, target = case.input_shapes
    array = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    graph, x = graph_with(array)
    op = make(graph, "Expand", [x, const(graph, ints(target))])
    check(op, np.broadcast_to(array, np.broadcast_shapes(shape, target)).copy())


@given(shapes.filter(bool), st.data())
def test_split_matches_numpy(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dim = shape[axis]
    cuts = sorted(data.draw(st.lists(st.integers(0, dim), max_size=3)))
    sizes = list(np.diff([0, *cuts, dim]))
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    graph, x = graph_with(array)
    op = make(graph, "Split", [x, const(graph, ints(sizes))], {"axis": axis},
              outputs=len(sizes))
    check(op, [part.copy() for part in np.split(array, cuts, axis=axis)])


def test_split_without_sizes_cuts_evenly_and_num_outputs_leaves_a_short_last_part():
    array = np.arange(10, dtype=np.float32)
    graph, x = graph_with(array)
    check(make(graph, "Split", [x], outputs=2), [array[:5], array[5:]])
    check(make(graph, "Split", [x], {"num_outputs": 3}, version=18, outputs=3),
          [array[:4], array[4:8], array[8:]])
    check(make(graph, "Split", [x], {"split": [3, 7]}, version=11, outputs=2),
          [array[:3], array[3:]])
    with pytest.raises(ShapeError, match="cannot split 10 evenly into 3"):
        make(graph, "Split", [x], outputs=3)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 12), st.integers(1, 6))
def test_split_into_num_outputs_slices_as_onnxs_reference_implementation(dim, count):
    """Too few elements for the last parts (5 into 4) leaves them short or empty, never
    of negative size."""
    from onnx import TensorProto
    from onnx import helper as oh
    from onnx.reference import ReferenceEvaluator

    names = [f"y{i}" for i in range(count)]
    node = oh.make_node("Split", ["x"], names, num_outputs=count)
    model = oh.make_model(oh.make_graph(
        [node], "split", [oh.make_tensor_value_info("x", TensorProto.FLOAT, (dim,))],
        [oh.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names]),
        opset_imports=[oh.make_opsetid("", 18)])
    array = np.arange(dim, dtype=np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": array})
    graph, x = graph_with(array)
    check(make(graph, "Split", [x], {"num_outputs": count}, version=18, outputs=count),
          [np.asarray(part) for part in expected])


@pytest.mark.parametrize("name", ["test_affine_grid_3d_expanded",
                                  "test_affine_grid_3d_align_corners_expanded"])
def test_affine_grid_expansion_imports_with_its_untaken_split_branch_typed(name):
    """The expansion's 2-d branch splits the 5-d size into 4 parts: 2, 2, 1 and 0, not -1.
    Its grid's shape depends on the size input's value, so it stays unknown."""
    case = node_cases("affinegrid")[name]
    ir = import_alone(case.model)
    branches = [graph for graph in ir.graphs if graph is not ir.main_graph]
    shapes = {t.id.rsplit("_", 2)[-2]: t.shape for graph in branches for t in graph.tensors
              if t.id.endswith("_then") and t.id.rsplit("_", 2)[-2] in ("N", "C", "H", "W")}
    assert shapes == {"N": (2,), "C": (2,), "H": (1,), "W": (0,)}
    assert output_types(ir) == [("float32", None)]


# -- patterns -------------------------------------------------------------------------------
@settings(deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple), st.data())
def test_transpose_of_transpose_composes_in_numpy_order(shape, data):
    first = data.draw(st.permutations(range(len(shape))))
    second = data.draw(st.permutations(range(len(shape))))
    ir, graph, x = graph_input(shape)
    inner = make(graph, "Transpose", [x], {"perm": list(first)})
    outer = make(graph, "Transpose", [inner.output(0)], {"perm": list(second)})
    graph.mark_output(outer.output(0))
    output_ids = list(graph.output_ids)
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert graph.output_ids == output_ids
    array = np.arange(int(np.prod(shape))).reshape(shape)
    expected = np.transpose(np.transpose(array, first), second)
    if not computing_ops(graph):  # the composition moved no data
        assert folded_to(graph, ["x"]) and np.array_equal(array.reshape(expected.shape),
                                                            expected)
        return
    [op] = graph.ops
    assert op.input(0) is x and op.output(0).shape == expected.shape
    assert np.array_equal(np.transpose(array, op.attributes["perm"]), expected)


def test_transpose_moving_only_unit_axes_is_dropped():
    ir, graph, x = graph_input((2, 1, 1))
    graph.mark_output(make(graph, "Transpose", [x], {"perm": [0, 2, 1]}).output(0))
    canonicalize(ir, REGISTRY)
    assert folded_to(graph, ["x"])


def test_reshape_of_reshape_is_one_reshape_with_the_copy_dims_spelled_out():
    ir, graph, x = graph_input((2, 3, 4))
    first = make(graph, "Reshape", [x, const(graph, ints([6, 4]))])
    second = make(graph, "Reshape", [first.output(0), const(graph, ints([0, 2, 2]))])
    graph.mark_output(second.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert graph.ops == [second] and second.input(0) is x
    assert list(second.input(1).data) == [6, 2, 2] and second.output(0).shape == (6, 2, 2)
    ir.verify()


def test_reshape_like_of_reshape_like_becomes_one_reshape_in_place_of_the_outer():
    ir, graph, x = graph_input((2, 3, 4))
    settings = OpSettings(scope="s", vgraph_id=3)
    first = make(graph, "Unsqueeze", [x, const(graph, ints([0]))])
    second = make(graph, "Flatten", [first.output(0)], {"axis": 2}, settings=settings)
    graph.mark_output(second.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    [op] = graph.ops
    assert op.type.name == "Reshape" and op.input(0) is x
    assert op.output(0).shape == (2, 12) and list(op.input(1).data) == [2, 12]
    assert op.settings.vgraph_id == 3 and op.settings.scope == "s"


def test_squeeze_of_unsqueeze_on_the_same_axes_is_the_input():
    ir, graph, x = graph_input((2, 3))
    axes = const(graph, ints([0, -1]))
    up = make(graph, "Unsqueeze", [x, axes])
    down = make(graph, "Squeeze", [up.output(0), axes])
    graph.mark_output(down.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert folded_to(graph, ["x"])


def test_unsqueeze_of_squeeze_is_the_input_only_when_it_restores_the_shape():
    ir, graph, x = graph_input((1, 3))
    down = make(graph, "Squeeze", [x, const(graph, ints([0]))])
    back = make(graph, "Unsqueeze", [down.output(0), const(graph, ints([0]))])
    moved = make(graph, "Unsqueeze", [down.output(0), const(graph, ints([1]))])
    graph.mark_output(back.output(0))
    graph.mark_output(moved.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert passed_on_ids(graph)[0] == "x"
    [op] = computing_ops(graph)
    assert op.type.name == "Reshape" and op.input(0) is x and op.output(0).shape == (3, 1)


@pytest.mark.parametrize("build", [
    lambda g, x: make(g, "Reshape", [x, const(g, ints([2, -1]))]),
    lambda g, x: make(g, "Transpose", [x], {"perm": [0, 1]}),
    lambda g, x: make(g, "Slice", [x, const(g, ints([0, -9])), const(g, ints([9, 9]))]),
    lambda g, x: make(g, "Identity", [x]),
    lambda g, x: make(g, "Expand", [x, const(g, ints([1, 3]))]),
    lambda g, x: make(g, "Concat", [x], {"axis": 0}),
    lambda g, x: make(g, "Flatten", [x]),
], ids=["reshape", "transpose", "slice", "identity", "expand", "concat", "flatten"])
def test_views_that_change_nothing_fold_to_their_input(build):
    ir, graph, x = graph_input((2, 3))
    graph.mark_output(build(graph, x).output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert folded_to(graph, ["x"])


def test_reversing_slice_is_not_an_identity():
    ir, graph, x = graph_input((3,))
    op = make(graph, "Slice", [x, const(graph, ints([-1])), const(graph, ints([-9])),
                               const(graph, ints([0])), const(graph, ints([-1]))])
    graph.mark_output(op.output(0))
    canonicalize(ir, REGISTRY)
    assert graph.ops == [op]


def test_views_of_constants_fold_to_constants():
    graph, x = graph_with(np.arange(6, dtype=np.float32).reshape(2, 3))
    op = make(graph, "Transpose", [x])
    graph.mark_output(op.output(0))
    canonicalize(graph, REGISTRY)
    [out] = graph.outputs
    assert not graph.ops and isinstance(out, Tensor) and out.tensor_type is TensorType.CONST
    assert np.array_equal(out.data, np.arange(6, dtype=np.float32).reshape(2, 3).T)
