"""The dimension layer of the solver: equations and inequalities between single axes.

Solved dimension variables are links (to another variable or to a known :class:`Dim`), so
a label inferred for one axis is seen by every axis linked to it. An unsolved variable keeps
its bounds: variables above and below it, and known sizes above it whose meet is its least
upper bound. This layer also owns the work queue and wakes constraints waiting for a variable;
:class:`~popart_unwind.shapes.solver.Solver` adds rows on top.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn, TypeVar

from popart_unwind.errors import ShapeError
from popart_unwind.shapes.row import (
    Constraint,
    Dim,
    DimEq,
    DimIneq,
    DimLike,
    DimVar,
    RowVar,
    fresh_id,
)

__all__ = ["DimEnvironment", "same_dim", "strongly_connected"]

K = TypeVar("K", bound=Hashable)


@dataclass
class _DimBounds:
    """What is known of an unsolved dimension variable ``v``: ``cur >= v >= subr``.

    ``uppers`` are known dims ``>= v``: their meet is v's least upper bound. ``ones`` are
    size-1 dims ``<= v``; they say nothing about sizes but are re-checked once ``v`` is
    solved, so that projections learn whether those axes broadcast.
    """

    cur: dict[DimVar, Constraint] = field(default_factory=dict)
    subr: dict[DimVar, Constraint] = field(default_factory=dict)
    uppers: list[tuple[DimLike, Constraint]] = field(default_factory=list)
    ones: list[tuple[DimLike, Constraint]] = field(default_factory=list)


def same_dim(a: DimLike, b: DimLike) -> bool:
    """Same variable, or the very same literal (literals differ by projection id)."""
    return a is b or (isinstance(a, DimVar) and a == b)


def _labels_clash(a: Dim, b: Dim) -> bool:
    return bool(a.label and b.label and a.label != b.label)


def strongly_connected(graph: Mapping[K, Iterable[K]]) -> list[list[K]]:
    """The strongly connected components of more than one node (iterative Tarjan)."""
    index: dict[K, int] = {}
    low: dict[K, int] = {}
    stack: list[K] = []
    on_stack: set[K] = set()
    found: list[list[K]] = []
    for root in graph:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(graph[root]))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = [stack.pop()]
                    while component[-1] != node:
                        component.append(stack.pop())
                    on_stack.difference_update(component)
                    if len(component) > 1:
                        found.append(component)
    return found


class DimEnvironment:
    """What is known about dimension variables, and the rules that extend it."""

    def __init__(self) -> None:
        self._dim_links: dict[DimVar, DimLike] = {}
        self._dim_bounds: dict[DimVar, _DimBounds] = {}
        self._queue: deque[Constraint] = deque()
        self._stuck: dict[int, Constraint] = {}
        self._stuck_keys = itertools.count()
        self._watchers: dict[DimVar | RowVar, list[int]] = {}
        # constraints that saw a solved variable without a label: re-run if it gains one
        self._unlabelled_uses: dict[DimVar, list[Constraint]] = {}
        self._causes: dict[DimVar, Constraint] = {}  # what solved each variable, for messages
        self.projection_pairs: list[tuple[int, int]] = []
        self.broadcast_projs: list[int] = []

    def dim(self, d: DimLike) -> DimLike:
        """The current value of ``d``: a Dim, or the representative of its unsolved class."""
        rep = self._rep(d)
        value = self._value(rep)
        return rep if value is None else value

    def _rep(self, d: DimLike) -> DimLike:
        """End of d's link chain: a literal, an unsolved variable, or a variable owning a Dim."""
        chain = []
        while isinstance(d, DimVar):
            nxt = self._dim_links.get(d)
            if nxt is None or isinstance(nxt, Dim):
                break
            chain.append(d)
            d = nxt
        for v in chain[:-1]:  # path compression: later lookups skip the chain
            self._dim_links[v] = d
        return d

    def _value(self, rep: DimLike) -> Dim | None:
        if isinstance(rep, Dim):
            return rep
        value = self._dim_links.get(rep)
        return value if isinstance(value, Dim) else None

    def _note_unlabelled(self, c: Constraint, rep: DimLike, value: Dim | None) -> None:
        if isinstance(rep, DimVar) and value is not None and value.label is None:
            self._unlabelled_uses.setdefault(rep, []).append(c)

    def _dim_eq(self, c: DimEq) -> None:
        a, b = self._rep(c.left), self._rep(c.right)
        if same_dim(a, b):
            return
        va, vb = self._value(a), self._value(b)
        self._note_unlabelled(c, a, va)
        self._note_unlabelled(c, b, vb)
        if va is None and vb is None:
            low, high = sorted((a, b), key=lambda v: v.id)  # type: ignore[union-attr]
            self._solve_dim(high, low, c)  # type: ignore[arg-type]
        elif va is None:
            self._solve_dim(a, b, c)  # type: ignore[arg-type]
        elif vb is None:
            self._solve_dim(b, a, c)  # type: ignore[arg-type]
        else:
            self._equal_known(c, a, va, b, vb)

    def _dim_ineq(self, c: DimIneq) -> None:
        cur, subr = self._rep(c.cur), self._rep(c.subr)
        if same_dim(cur, subr):
            return
        vc, vs = self._value(cur), self._value(subr)
        self._note_unlabelled(c, cur, vc)
        self._note_unlabelled(c, subr, vs)
        if vc is not None and vs is not None:
            if vs.size == 1 and vc.size != 1:
                if vs.proj_id is not None:
                    self.broadcast_projs.append(vs.proj_id)
            elif vc.size == vs.size and vc.size == 1 and _labels_clash(vc, vs):
                self._pair(vc, vs)  # two size-1 axes: broadcasting, labels need not agree
            elif vc.size == vs.size:
                self._equal_known(c, cur, vc, subr, vs)
            else:
                self._fail(c, f"size {vs} does not broadcast to {vc}", cur, subr)
        elif vc is not None:  # known >= unknown
            if vc.size == 1:
                self._solve_dim(subr, cur, c)  # type: ignore[arg-type]
            else:
                self._add_dim_upper(subr, cur, c)  # type: ignore[arg-type]
        elif vs is not None:  # unknown >= known
            if vs.size != 1:
                self._solve_dim(cur, subr, c)  # type: ignore[arg-type]
            else:
                self._dim_entry(cur).ones.append((subr, c))  # type: ignore[arg-type]
        else:
            self._add_dim_bound(cur, subr, c)  # type: ignore[arg-type]

    def _equal_known(self, c: Constraint, a: DimLike, va: Dim, b: DimLike, vb: Dim) -> None:
        if va.size != vb.size:
            self._fail(c, f"sizes differ: {va} vs {vb}", a, b)
        if _labels_clash(va, vb):
            self._fail(c, f"labels differ: {va} vs {vb}", a, b)
        self._pair(va, vb)
        label = va.label or vb.label
        if isinstance(a, DimVar) and isinstance(b, DimVar):
            low, high = sorted((a, b), key=lambda v: v.id)
            high_value = va if high is a else vb
            self._dim_links[high] = low  # merge the two solved classes: they share labels now
            uses = self._unlabelled_uses.pop(high, [])
            if label and high_value.label is None:
                self._queue.extend(uses)
            else:
                self._unlabelled_uses.setdefault(low, []).extend(uses)
            self._set_label(low, label)
        else:
            for rep in (a, b):
                if isinstance(rep, DimVar):
                    self._set_label(rep, label)

    def _set_label(self, owner: DimVar, label: str | None) -> None:
        """Give a solved variable the label inferred for it; re-run what saw it unlabelled."""
        value = self._dim_links[owner]
        if label and isinstance(value, Dim) and value.label is None:
            self._dim_links[owner] = Dim(value.size, label, value.proj_id)
            self._queue.extend(self._unlabelled_uses.pop(owner, []))

    def _pair(self, a: Dim, b: Dim) -> None:
        if a.proj_id is not None and b.proj_id is not None:
            self.projection_pairs.append((a.proj_id, b.proj_id))

    def _dim_entry(self, v: DimVar) -> _DimBounds:
        return self._dim_bounds.setdefault(v, _DimBounds())

    def _meet(self, bounds: _DimBounds) -> DimLike | None:
        """The first upper bound if all of ``uppers`` agree, else None: only 1 fits below them."""
        reps = [self._rep(u) for u, _ in bounds.uppers]
        values = [self._value(r) for r in reps]
        sizes = {v.size for v in values if v is not None}
        labels = {v.label for v in values if v is not None and v.label}
        return reps[0] if len(sizes) == 1 and len(labels) <= 1 else None

    def _add_dim_upper(self, v: DimVar, upper: DimLike, c: Constraint) -> None:
        bounds = self._dim_entry(v)
        if not any(same_dim(u, upper) for u, _ in bounds.uppers):
            bounds.uppers.append((upper, c))
            for w in bounds.subr:
                self._derive(c, DimIneq, upper, w)
        if self._meet(bounds) is None:  # two different sizes above v: only 1 fits below both
            self._solve_dim(v, Dim(1, proj_id=fresh_id()), c)

    def _add_dim_bound(self, cur: DimVar, subr: DimVar, c: Constraint) -> None:
        above = self._dim_entry(cur)
        if subr in above.subr:
            return
        above.subr[subr] = c
        self._dim_entry(subr).cur[cur] = c
        for upper, origin in above.uppers:
            self._derive(origin, DimIneq, upper, subr)

    def _solve_dim(self, v: DimVar, value: DimLike, cause: Constraint | None) -> None:
        """Link ``v`` to ``value`` and re-state everything that was known about ``v``."""
        bounds = self._dim_bounds.pop(v, None)
        self._dim_links[v] = value
        if cause is not None:
            self._causes[v] = cause
        if bounds is not None:
            for u, origin in bounds.cur.items():
                del self._dim_bounds[u].subr[v]
                self._derive(origin, DimIneq, u, v)
            for w, origin in bounds.subr.items():
                del self._dim_bounds[w].cur[v]
                self._derive(origin, DimIneq, v, w)
            for upper, origin in bounds.uppers:
                self._derive(origin, DimIneq, upper, v)
            for one, origin in bounds.ones:
                self._derive(origin, DimIneq, v, one)
        self._wake(v)

    # ----- waiting constraints ----------------------------------------------------------------
    def _wake(self, v: DimVar | RowVar) -> None:
        for key in self._watchers.pop(v, []):
            c = self._stuck.pop(key, None)
            if c is not None:
                self._queue.append(c)

    # ----- finalisation stages ---------------------------------------------------------------
    def _merge_dim_cycles(self) -> bool:
        """``a >= b >= ... >= a`` makes them all equal (a deduction, checked once per round)."""
        graph = {v: bounds.subr for v, bounds in self._dim_bounds.items()}
        cycles = strongly_connected(graph)
        for first, *others in cycles:
            for other in others:
                self._derive(next(iter(graph[other].values())), DimEq, first, other)
        return bool(cycles)

    def _assign_dim_lubs(self) -> bool:
        chosen = []
        for v, bounds in self._dim_bounds.items():
            if bounds.uppers:
                lub = self._meet(bounds)
                lub = Dim(1, proj_id=fresh_id()) if lub is None else lub
                chosen.append((v, lub, bounds.uppers[0][1]))
        for v, lub, origin in chosen:
            self._solve_dim(v, lub, origin)
        return bool(chosen)

    # ----- helpers ----------------------------------------------------------------------------
    def _make(self, parent: Constraint, kind: type, *args: object) -> Constraint:
        return kind(*args, origin=parent.origin, root=parent.root or parent)

    def _derive(self, parent: Constraint, kind: type, *args: object) -> None:
        self._queue.append(self._make(parent, kind, *args))

    def _describe(self, c: Constraint) -> str:
        assert isinstance(c, DimEq | DimIneq)
        left, right = (c.left, c.right) if isinstance(c, DimEq) else (c.cur, c.subr)
        relation = "=" if isinstance(c, DimEq) else ">="
        return f"{self.dim(left)} {relation} {self.dim(right)}"

    def _fail(self, c: Constraint, problem: str, *sides: DimLike) -> NoReturn:
        """Raise naming the original constraint and where each conflicting size came from."""
        root = c.root or c
        lines = [f"{problem}; in {self._where(root)}"]
        for side in sides:
            cause = self._causes.get(side) if isinstance(side, DimVar) else None
            if cause is not None and (cause.root or cause) is not root:
                lines.append(f"{self.dim(side)} comes from {self._where(cause.root or cause)}")
        raise ShapeError("; ".join(lines))

    def _where(self, root: Constraint) -> str:
        return f"{self._describe(root)} ({root.origin})" if root.origin else self._describe(root)
