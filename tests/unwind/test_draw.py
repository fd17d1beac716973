"""Pictures of solutions: a valid, deterministic PNG, written atomically, coloured by
mapping."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from popart_unwind.errors import PopartUnwindError, SolverError
from popart_unwind.unwind import TensorId, UnwindGraph
from popart_unwind.unwind.draw import cell_colours, draw, grid_shape, is_strip

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def basic():
    """The first picture of poprithms' unwinding notes: a sink tied to a source, feeding a
    barrier."""
    g = UnwindGraph()
    sink = g.sink((2, 3), "sink")
    source = g.source((2, 3), "source")
    g.valued_pair(sink, source, 5.0)
    (out,) = g.barrier([sink], [(2, 3)], "out")
    return g.solve("greedy0"), sink, source, out


def mixed():
    """Every kind of drawing: rank 0, rank 4 blocks, an empty tensor, views, a heat strip."""
    g = UnwindGraph()
    x = g.sink((2, 2, 3, 4), "x")
    scalar = g.sink((), "scalar")
    g.valued_pair(scalar, g.source((), "scalar_target"), 1.0)
    flat = g.reshape(x, (6, 8), "flat")
    g.valued_pair(flat, g.source((6, 8), "flat_target"), 2.0)
    big = g.source((20, 30), "big")
    g.valued_pair(g.sink((20, 30), "big_copy"), big, 1.0)
    g.barrier([x, scalar, g.sink((0, 3), "empty")], [(3,)], "out")
    return g.solve("greedy0")


def test_writes_a_valid_png_of_plausible_size(tmp_path):
    solution, *_ = basic()
    target = tmp_path / "basic.png"
    assert draw(solution, str(target), title="basic") == target
    data = target.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert 5_000 < len(data) < 2_000_000
    height, width, channels = imread(target).shape
    assert 200 < width < 5_000 and 200 < height < 5_000 and channels in (3, 4)
    assert [p.name for p in tmp_path.iterdir()] == ["basic.png"]


def test_every_kind_of_tensor_is_drawn(tmp_path):
    target = draw(mixed(), tmp_path / "mixed.png")
    assert imread(target).shape[1] > 500


def test_the_same_solution_gives_identical_bytes(tmp_path):
    solution = mixed()
    first = draw(solution, tmp_path / "a.png").read_bytes()
    second = draw(solution, tmp_path / "b.png").read_bytes()
    assert first == second


def test_drawing_replaces_an_existing_file(tmp_path):
    solution, *_ = basic()
    target = tmp_path / "figure.png"
    target.write_bytes(b"old")
    draw(solution, target)
    assert target.read_bytes().startswith(PNG_SIGNATURE)


def test_only_the_chosen_tensors_are_drawn(tmp_path):
    solution, sink, source, _ = basic()
    everything = draw(solution, tmp_path / "all.png").read_bytes()
    chosen = draw(solution, tmp_path / "some.png", tensors=[source, sink, sink]).read_bytes()
    assert chosen != everything
    assert draw(solution, tmp_path / "none.png", tensors=[]).read_bytes().startswith(
        PNG_SIGNATURE
    )


def test_equal_layouts_get_identical_colours_and_others_differ():
    solution, sink, source, out = basic()
    assert np.array_equal(solution.layout(sink), solution.layout(source))
    colours = cell_colours(solution, sink)
    assert colours.shape == (2, 3, 4)
    assert np.array_equal(colours, cell_colours(solution, source))
    assert len({tuple(c) for c in colours.reshape(-1, 4)}) == 6  # 6 mappings, 6 colours
    assert not np.array_equal(colours, cell_colours(solution, out))


def test_heat_strip_colours_follow_layouts_too():
    solution = mixed()
    graph = solution.graph
    big, copy = (next(t for t in graph.tensors() if t.name == n) for n in ("big", "big_copy"))
    assert is_strip(graph.shape(big))
    assert np.array_equal(solution.layout(big), solution.layout(copy))
    assert np.array_equal(cell_colours(solution, big), cell_colours(solution, copy))
    assert cell_colours(solution, big).shape == (20, 30, 4)


def test_colours_stay_distinct_beyond_the_palette_by_hatching(tmp_path):
    """40 mappings in one tensor: colours repeat after 20, so the drawing hatches them."""
    g = UnwindGraph()
    g.source((5, 8), "many")
    solution = g.solve("greedy0")
    colours = cell_colours(solution, g.tensors()[0]).reshape(-1, 4)
    assert len({tuple(c) for c in colours}) == 20
    assert np.array_equal(colours[:20], colours[20:])
    assert draw(solution, tmp_path / "many.png").exists()


@pytest.mark.parametrize(
    ("shape", "grid"),
    [((), (1, 1)), ((5,), (1, 5)), ((2, 3), (2, 3)), ((2, 3, 4), (6, 4)), ((0, 3), (0, 3))],
)
def test_grid_shape(shape, grid):
    assert grid_shape(shape) == grid


def test_large_or_long_tensors_are_heat_strips():
    assert not is_strip((16, 16))
    assert is_strip((257,)) and is_strip((17, 16))
    assert is_strip((1, 65))


def test_unknown_tensor_is_a_clear_error_and_writes_nothing(tmp_path):
    solution, sink, *_ = basic()
    stranger = TensorId(99, "stranger")
    with pytest.raises(SolverError, match=r"stranger#99 is not a tensor of this graph"):
        draw(solution, tmp_path / "x.png", tensors=[sink, stranger])
    with pytest.raises(PopartUnwindError):
        cell_colours(solution, stranger)
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_writing_leaves_no_partial_file(tmp_path, monkeypatch):
    solution, *_ = basic()
    target = tmp_path / "figure.png"
    target.write_bytes(b"previous")

    def fail_halfway(self, stream, **kwargs):
        stream.write(PNG_SIGNATURE)
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", fail_halfway)
    with pytest.raises(OSError, match="disk full"):
        draw(solution, target)
    assert [p.name for p in tmp_path.iterdir()] == ["figure.png"]
    assert target.read_bytes() == b"previous"
