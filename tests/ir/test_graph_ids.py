"""A graph's input and output ids: lists whose membership test reads a set, which every
change to the list must keep true (oracle: a plain list given the same changes)."""

from __future__ import annotations

import copy
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.ir import Ir
from popart_unwind.ir.graph import TensorIds

NAMES = st.sampled_from(["a", "b", "c", "d"])
CHANGES = st.one_of(
    st.tuples(st.just("append"), NAMES),
    st.tuples(st.just("extend"), st.lists(NAMES, max_size=3)),
    st.tuples(st.just("insert"), st.integers(-3, 3), NAMES),
    st.tuples(st.just("pop"), st.integers(-3, 3)),
    st.tuples(st.just("remove"), NAMES),
    st.tuples(st.just("clear"),),
    st.tuples(st.just("sort"),),
    st.tuples(st.just("reverse"),),
    st.tuples(st.just("__setitem__"), st.integers(-3, 3), NAMES),
    st.tuples(st.just("__delitem__"), st.integers(-3, 3)),
    st.tuples(st.just("slice"), st.lists(NAMES, max_size=3)),
    st.tuples(st.just("__iadd__"), st.lists(NAMES, max_size=3)),
    st.tuples(st.just("__imul__"), st.integers(0, 2)),
)


def _apply(ids: list, change: tuple) -> None:
    name, *args = change
    if name == "slice":
        ids[1:3] = args[0]
    else:
        getattr(ids, name)(*args)


@settings(max_examples=200, deadline=None)
@given(start=st.lists(NAMES, max_size=4), changes=st.lists(CHANGES, max_size=12))
def test_membership_follows_every_change(start, changes):
    ids, oracle = TensorIds(start), list(start)
    for change in changes:
        outcomes = []
        for target in (ids, oracle):
            try:
                _apply(target, change)
                outcomes.append(None)
            except (IndexError, ValueError) as error:
                outcomes.append(type(error))
        assert outcomes[0] == outcomes[1]
        assert list(ids) == oracle
        for name in ("a", "b", "c", "d", "e"):
            assert (name in ids) == (name in oracle)


def test_copies_and_pickles_keep_their_own_membership():
    ids = TensorIds(["a", "b"])
    assert "a" in ids  # the set is built
    for other in (copy.copy(ids), copy.deepcopy(ids), pickle.loads(pickle.dumps(ids))):
        other.remove("a")
        assert "a" not in other and "b" in other
    assert "a" in ids


def test_assigned_lists_become_tensor_ids():
    graph = Ir().main_graph
    graph.add_input("x", "float32", (2,))
    graph.output_ids = ["x"]
    assert isinstance(graph.output_ids, TensorIds)
    assert graph.tensor("x").is_graph_output() and graph.tensor("x").is_graph_input()
    graph.output_ids.pop()
    assert not graph.tensor("x").is_graph_output()
    assert graph.output_ids == [] and "x" not in graph.output_ids


class _Name(str):
    """A tensor id that counts the comparisons made with it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        type(self).compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_lookups_do_not_scan_the_ids(monkeypatch):
    """``is_graph_output`` is asked per op by the cost walk and the layout rules: for a
    graph of 10,000 outputs a scan per question made planning quadratic. A set finds an
    id by its hash (and the very object without comparing); a scan compares it with every
    id before it."""
    monkeypatch.setattr(_Name, "compared", 0)
    names = [_Name(f"y{i}") for i in range(1000)]
    ids = TensorIds(names)
    assert all(name in ids for name in names)
    ids.append(_Name("z"))
    assert all(name in ids for name in names)
    assert _Name.compared < 100
