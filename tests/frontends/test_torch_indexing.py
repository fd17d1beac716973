"""ATen's indexing ops in the PyTorch front end, checked against torch's values.

``slice_scatter`` (the backward of a slice) becomes a Concat of Slices of the base around the
source, or, with a step above 1, a Gather of the source rows and a Where over a constant
mask; ``index`` (advanced indexing by integer tensors) becomes a Gather, after merging the
indexed axes into one when there are several. Each case imports a module, computes the
graph's outputs with every op's own numpy fold (the IR's reference semantics) and compares
them with what torch computes on the same random inputs, negative indices included.
``index_put`` with accumulation (an embedding's gradient) becomes a ScatterND with reduction
"add", duplicates accumulated as torch does; without accumulation it stays opaque.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fold_oracle import fold_all  # noqa: E402

from popart_unwind.errors import ModelImportError  # noqa: E402
from popart_unwind.ir import Ir  # noqa: E402
from popart_unwind.ops.coverage import ops_without_rule  # noqa: E402
from popart_unwind.ops.shape_inference import check_shapes  # noqa: E402


def _names(ir: Ir) -> collections.Counter:
    return collections.Counter(op.type.name for op in ir.main_graph.ops)


def _run(module: torch.nn.Module, inputs: tuple) -> tuple[Ir, list[np.ndarray]]:
    """The imported graph and its outputs by the folds, after checking both against torch:
    no op without a layout rule but the Gathers off axis 0 (Gather's rule models table
    lookups along axis 0 only), every output equal to torch's."""
    ir = Ir.from_torch(module, inputs)
    ir.verify()
    check_shapes(ir)
    off_axis = sum(1 for op in ir.main_graph.ops
                   if op.type.name == "Gather" and op.attributes.get("axis", 0) != 0)
    assert ops_without_rule(ir) == ({"Gather": off_axis} if off_axis else {})
    feeds = {t.id: x.numpy() for t, x in zip(ir.main_graph.inputs, inputs, strict=True)}
    values = fold_all(ir, feeds)
    expected = module(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for value, reference in zip(values, expected, strict=True):
        assert value.shape == tuple(reference.shape)
        assert value.dtype == reference.numpy().dtype
        np.testing.assert_array_equal(value, reference.numpy())
    return ir, values


# -- slice_scatter ------------------------------------------------------------------------
class SliceScatter(torch.nn.Module):
    def __init__(self, dim: int, start, end, step: int) -> None:
        super().__init__()
        self.dim, self.start, self.end, self.step = dim, start, end, step

    def forward(self, base, src):
        return torch.ops.aten.slice_scatter.default(base, src, self.dim, self.start, self.end,
                                                    self.step)


def _slice_case(shape, dim, start, end, step):
    generator = torch.Generator().manual_seed(len(shape) * 31 + dim)
    base = torch.randn(shape, generator=generator)
    src = torch.randn(base[(slice(None),) * (dim % len(shape)) + (
        slice(start, end, step),)].shape, generator=generator)
    return SliceScatter(dim, start, end, step), (base, src)


STEP_ONE = [
    ((2, 2, 5, 8), 3, 4, 2**63 - 1),  # rotate_half's backward: the upper half
    ((2, 2, 5, 8), 3, 0, 4),  # and the lower half
    ((6, 5), 0, 2, 4),  # a middle band
    ((6, 5), -1, -3, None),  # negative dim and start, open end
    ((6, 5), 1, None, -2),  # negative end
    ((4, 7), 1, -100, 3),  # start clamped to 0
]


@pytest.mark.parametrize(("shape", "dim", "start", "end"), STEP_ONE)
def test_step_one_slice_scatter_is_a_concat_of_slices(shape, dim, start, end):
    ir, _ = _run(*_slice_case(shape, dim, start, end, 1))
    names = _names(ir)
    assert names["Concat"] == 1 and set(names) <= {"Concat", "Slice"}


def test_a_slice_scatter_over_the_whole_axis_is_the_source():
    ir, _ = _run(*_slice_case((3, 4), 1, 0, 4, 1))
    assert _names(ir) == {"Identity": 1}
    assert ir.main_graph.ops[0].input(0) is ir.main_graph.inputs[1]


def test_an_empty_slice_scatter_is_the_base():
    ir, _ = _run(*_slice_case((3, 4), 1, 3, 1, 1))
    assert _names(ir) == {"Identity": 1}
    assert ir.main_graph.ops[0].input(0) is ir.main_graph.inputs[0]


@pytest.mark.parametrize(("shape", "dim", "start", "end", "step"), [
    ((3, 9), 1, 1, None, 2),
    ((9, 2, 3), 0, -8, -1, 3),
    ((2, 10), -1, None, None, 4),
    ((5, 4), 0, 2, 3, 5),  # one written position: a Concat
])
def test_strided_slice_scatter_gathers_source_rows_under_a_mask(shape, dim, start, end, step):
    ir, _ = _run(*_slice_case(shape, dim, start, end, step))
    names = _names(ir)
    if len(range(*slice(start, end, step).indices(shape[dim]))) == 1:
        assert names["Concat"] == 1
    else:
        assert names == {"Gather": 1, "Where": 1}


def test_slice_scatter_with_a_source_of_the_wrong_shape_names_the_op():
    from popart_unwind.frontends.aten_ops import CONVERTERS
    from popart_unwind.frontends.torch_values import TorchContext

    ctx = TorchContext(Ir().main_graph)
    base = ctx.graph.add_input("base", "float32", (4, 6))
    src = ctx.graph.add_input("src", "float32", (4, 3))

    class Node:
        name = "slice_scatter_1"

    with pytest.raises(ModelImportError, match=r"slice_scatter_1.*expected \(4, 2\)"):
        CONVERTERS["slice_scatter.default"](ctx, Node(), (base, src, 1, 2, 4), {})


# -- index --------------------------------------------------------------------------------
def _indices(generator, size: int, shape: tuple[int, ...], dtype=torch.int64):
    """Random indices into an axis of ``size``, negative ones included."""
    return torch.randint(-size, size, shape, generator=generator, dtype=dtype)


class Index(torch.nn.Module):
    def __init__(self, pattern) -> None:
        super().__init__()
        self.pattern = pattern

    def forward(self, x, *indices):
        return self.pattern(x, *indices)


INDEX_CASES = {
    # one index tensor: a Gather on its axis
    "rows": ((7, 5), lambda x, i: x[i], [(0, (2, 3))]),
    "columns": ((4, 7, 3), lambda x, i: x[:, i], [(1, (5,))]),
    "last axis": ((4, 3, 6), lambda x, i: x[..., i], [(2, (2, 2))]),
    "scalar index": ((6, 3), lambda x, i: torch.ops.aten.index.Tensor(x, [None, i]),
                     [(1, ())]),
    # several index tensors on adjacent axes: broadcast where the axes were
    "pairs": ((5, 6, 7), lambda x, i, j: x[i, j], [(0, (3, 1)), (1, (4,))]),
    "middle pair": ((2, 5, 6, 3), lambda x, i, j: x[:, i, j], [(1, (4,)), (2, (4,))]),
    "triple": ((3, 4, 5), lambda x, i, j, k: x[i, j, k], [(0, (2, 1, 1)), (1, (3, 1)),
                                                          (2, (4,))]),
    # apart: the broadcast index shape comes first
    "apart": ((4, 5, 6), lambda x, i, j: x[i, :, j], [(0, (2, 3)), (2, (3,))]),
    "apart with a gap": ((3, 2, 4, 5), lambda x, i, j: x[:, i, :, j], [(1, (6,)),
                                                                        (3, (6,))]),
}


@pytest.mark.parametrize("case", sorted(INDEX_CASES))
def test_index_by_integer_tensors_is_a_gather(case):
    shape, pattern, index_specs = INDEX_CASES[case]
    generator = torch.Generator().manual_seed(sorted(INDEX_CASES).index(case))
    x = torch.randn(shape, generator=generator)
    indices = [_indices(generator, shape[axis], index_shape)
               for axis, index_shape in index_specs]
    assert any((i < 0).any() for i in indices)
    ir, _ = _run(Index(pattern), (x, *indices))
    assert _names(ir)["Gather"] == 1
    assert all(op.type.domain != "aten" for op in ir.main_graph.ops)


def test_int32_indices_and_the_models_mask_lookup():
    """The language models index their (batch, sequence) padding mask with an arange per
    axis shaped (batch, 1, 1, 1) and (1, 1, 1, sequence): a boolean table, int64 indices."""
    generator = torch.Generator().manual_seed(7)
    mask = torch.rand((2, 16), generator=generator) > 0.3
    batch = torch.arange(2).reshape(2, 1, 1, 1)
    sequence = torch.arange(16).reshape(1, 1, 1, 16)
    _, [value] = _run(Index(lambda x, i, j: x[i, j]), (mask, batch, sequence))
    assert value.shape == (2, 1, 1, 16) and value.dtype == np.bool_
    table = torch.randn((6, 4), generator=generator)
    rows = _indices(generator, 6, (3, 2), dtype=torch.int32)
    _run(Index(lambda x, i: x[i]), (table, rows))
    _run(Index(lambda x, i, j: x[i, j]), (table, rows, _indices(generator, 4, (2,),
                                                                dtype=torch.int32)))


# -- index_put ----------------------------------------------------------------------------
class IndexPut(torch.nn.Module):
    def __init__(self, count: int, accumulate: bool = True, leading_none: bool = False,
                 op=torch.ops.aten.index_put.default) -> None:
        super().__init__()
        self.count, self.accumulate, self.leading_none, self.op = (count, accumulate,
                                                                   leading_none, op)

    def forward(self, table, *rest):
        indices, values = list(rest[:self.count]), rest[self.count]
        if self.leading_none:
            indices = [None, *indices]
        return self.op(table, indices, values, self.accumulate)


INDEX_PUT_CASES = {
    # table shape, index shapes (by indexed axis), values shape
    "embedding gradient": ((6, 4), [(2, 5)], (2, 5, 4)),  # ids [batch, seq], grad rows
    "one row per index": ((7, 3), [(9,)], (9, 3)),
    "scalar rows": ((5,), [(8,)], (8,)),
    "values broadcast": ((6, 4), [(3, 2)], (4,)),
    "pairs broadcast": ((5, 3, 4), [(3, 1), (4,)], (3, 4, 4)),
    "pairs, values broadcast": ((5, 3, 2), [(6,), (6,)], (1, 2)),
    "whole index": ((3, 4), [(7,), (7,)], (7,)),
}


@pytest.mark.parametrize("case", sorted(INDEX_PUT_CASES))
def test_accumulating_index_put_is_a_scatter_nd_add(case):
    """Duplicates accumulate as torch's do (more indices than rows forces some)."""
    shape, index_shapes, values_shape = INDEX_PUT_CASES[case]
    generator = torch.Generator().manual_seed(sorted(INDEX_PUT_CASES).index(case))
    table = torch.randn(shape, generator=generator)
    indices = [_indices(generator, shape[axis], index_shape)
               for axis, index_shape in enumerate(index_shapes)]
    values = torch.randn(values_shape, generator=generator)
    ir, _ = _run(IndexPut(len(indices)), (table, *indices, values))
    names = _names(ir)
    assert names["ScatterND"] == 1 and all(op.type.domain != "aten"
                                           for op in ir.main_graph.ops)
    [scatter] = [op for op in ir.main_graph.ops if op.type.name == "ScatterND"]
    assert scatter.attributes["reduction"] == "add"


def test_embedding_backward_is_a_scatter_nd_add_with_duplicates():
    """The form of torch's embedding backward (zeros, ids, gradient rows), written with the
    in-place and the unsafe spellings of index_put: repeated ids sum their rows."""
    generator = torch.Generator().manual_seed(11)
    table = torch.zeros(5, 3)
    ids = torch.tensor([[1, 3, 1], [1, 0, 4]])  # row 1 three times
    grad = torch.randn(2, 3, 3, generator=generator)
    for op in (torch.ops.aten.index_put_.default, torch.ops.aten._unsafe_index_put.default):
        module = IndexPut(1, op=op)
        if op is torch.ops.aten.index_put_.default:
            module = _CloneFirst(module)
        _, [value] = _run(module, (table, ids, grad))
        expected = np.zeros((5, 3), np.float32)
        np.add.at(expected, ids.numpy(), grad.numpy())
        np.testing.assert_allclose(value, expected, rtol=1e-6)


class _CloneFirst(torch.nn.Module):
    """In-place ops write a clone, as a functionalised graph does."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, table, *rest):
        return self.inner(table.clone(), *rest)


@pytest.mark.parametrize("form", ["no accumulation", "leading None", "boolean mask",
                                  "other dtype"])
def test_index_put_forms_without_an_exact_scatter_stay_opaque(form):
    """Without accumulation torch leaves duplicates unspecified; indices after a None, a
    boolean mask and values of another dtype are not converted: kept whole, with torch's
    shape, and listed."""
    generator = torch.Generator().manual_seed(3)
    table, values = torch.zeros(6, 4), torch.randn(5, 4, generator=generator)
    rows = _indices(generator, 6, (5,))
    module = IndexPut(1)
    if form == "no accumulation":
        module = IndexPut(1, accumulate=False)
    elif form == "leading None":
        module, rows, values = IndexPut(1, leading_none=True), _indices(generator, 4, (6,)), \
            torch.randn(6, 6, generator=generator)
    elif form == "boolean mask":
        rows = torch.tensor([True, False, True, True, False, True])
        values = torch.randn(4, 4, generator=generator)
    else:
        values = values.double()
    ir = Ir.from_torch(module, (table, rows, values))
    assert ops_without_rule(ir) == {"aten::index_put": 1}
    [op] = [op for op in ir.main_graph.ops if op.type.domain == "aten"]
    assert op.output(0).shape == (6, 4)


# -- scatter, pad, sums of booleans (a cross-entropy loss and its backward) -----------------
class ScatterValue(torch.nn.Module):
    def forward(self, x, index):
        return x.scatter(1, index, -1.0)


class ScatterSource(torch.nn.Module):
    def forward(self, x, index, source):
        return x.scatter(0, index, source)


class PadConstant(torch.nn.Module):
    def __init__(self, pad: tuple[int, ...], value: float) -> None:
        super().__init__()
        self.pad, self.value = pad, value

    def forward(self, x):
        return torch.nn.functional.pad(x, self.pad, value=self.value)


class CountTrue(torch.nn.Module):
    def forward(self, labels):
        return (labels != -100).sum(), (labels > 3).sum(dim=1)


def test_scatter_of_a_value_and_of_a_source_become_scatter_elements():
    rng = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=rng)
    index = torch.randint(0, 6, (4, 1), generator=rng)
    ir, _ = _run(ScatterValue(), (x, index))
    assert _names(ir)["ScatterElements"] == 1
    index = torch.stack([torch.randperm(4, generator=rng)[:3] for _ in range(6)], dim=1)
    ir, _ = _run(ScatterSource(), (x, index, torch.randn(3, 6, generator=rng)))
    assert _names(ir)["ScatterElements"] == 1


@pytest.mark.parametrize("pad", [(0, 1), (2, 0), (1, 1, 0, 2), (0, 0, 3, 1), (0, 0)])
def test_a_constant_pad_is_a_concat_with_constant_blocks(pad):
    x = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    ir, _ = _run(PadConstant(pad, -100), (x,))
    assert "Pad" not in _names(ir)
    ir, _ = _run(PadConstant(pad, 0.5), (torch.randn(3, 4),))


def test_a_sum_of_booleans_counts_in_int64():
    labels = torch.tensor([[1, -100, 5, 7], [-100, -100, 2, 9]])
    _, values = _run(CountTrue(), (labels,))
    assert values[0] == 5 and values[1].tolist() == [2, 1]
