"""The shape constraint solver: unification, broadcasting inequalities, LUBs, finalisation.

Equations are solved by unification with substitution (solved variables are links in
``_dim_links`` / ``_row_links``). An inequality is simplified into equations, variable
bounds or least upper bounds; what cannot be decided yet waits, indexed by the variables
whose solution would let it progress. Nothing is ever guessed while solving, so the fixpoint
does not depend on the order constraints arrive in. Guessing happens only in
:meth:`Solver.finalise`, in stages that each act on *all* eligible variables at once.

Ground dimension pairs met along the way are recorded as projection facts
(``projection_pairs``, ``broadcast_projs``): which axes iterate together and which are
broadcast. :mod:`popart_unwind.shapes.projections` reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from popart_unwind.shapes.dims import DimEnvironment, same_dim, strongly_connected
from popart_unwind.shapes.row import (
    Constraint,
    Dim,
    DimEq,
    DimIneq,
    DimLike,
    DimVar,
    Row,
    RowEq,
    RowIneq,
    RowSlice,
    RowVar,
    TotalElems,
    fresh_id,
)

__all__ = ["Solver"]


@dataclass
class _RowBounds:
    """What is known of an unsolved row variable: ``cur >= v >= subr`` and closed ``uppers``."""

    cur: dict[RowVar, Constraint] = field(default_factory=dict)
    subr: dict[RowVar, Constraint] = field(default_factory=dict)
    uppers: list[tuple[Row, Constraint]] = field(default_factory=list)


class Solver(DimEnvironment):
    """Collects constraints and solves them to a fixpoint; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self._row_links: dict[RowVar, Row] = {}
        self._row_bounds: dict[RowVar, _RowBounds] = {}
        # Rows only gain axes copied from other rows (one more per slice), so no solution
        # needs a row longer than all stated axes together; a cycle of inequalities that keeps
        # growing rows is caught by counting the axes each row variable stands below.
        self._axes_needed = 1
        self._depth: dict[RowVar, int] = {}

    # ----- public interface -------------------------------------------------------------------
    def add(self, *constraints: Constraint) -> None:
        """Queue constraints (and the Total_elems of any row they mention); solve() runs them."""
        for c in constraints:
            self._queue.append(c)
            rows = [getattr(c, name) for name in _ROW_FIELDS.get(type(c), ())]
            self._axes_needed += sum(len(row) + 1 for row in rows)
            for row in rows:
                if row.total_elems is not None:
                    self._queue.append(TotalElems(row, row.total_elems, c.origin))

    def solve(self) -> None:
        """Simplify queued constraints until nothing more can be deduced."""
        while self._queue:
            c = self._queue.popleft()
            _HANDLERS[type(c)](self, c)

    def finalise(self) -> None:
        """Solve, then default unsolved variables stage by stage until none is left.

        Stages, the first that applies acts and solving resumes:

        0. (a deduction) cycles of variable bounds make their variables equal;
        1. dim variables take their LUB;
        2. rows related by pending batch slices: the shortest of each connected group gets no
           further axes, the slices then fix the others (not their LUBs);
        3. row variables take their LUB (under a pending Total_elems, only the shortest right
           part of it that holds the count);
        4. row variables not waiting below another row get no further axes (one axis if a
           pending Total_elems needs it);
        5. dim variables become 1, except the rightmost unknown of each pending Total_elems,
           which the constraint then determines.
        """
        stages = (
            self._merge_cycles,
            self._assign_dim_lubs,
            self._close_slices,
            self._assign_row_lubs,
            self._close_rows,
            self._default_dims,
        )
        while True:
            self.solve()
            if not any(stage() for stage in stages):
                return

    def row(self, r: Row) -> Row:
        """``r`` with solved row variables substituted and its dims as far as known."""
        resolved = self._resolve_row(r)
        return Row(
            tuple(self.dim(d) for d in resolved.dims),
            resolved.row_var,
            beg_dims=tuple(self.dim(d) for d in resolved.beg_dims),
        )

    def final_row(self, r: Row) -> Row:
        """``r`` with every variable the solver never saw taken as 1 / no further axes."""
        resolved = self.row(r)
        return Row(tuple(d if isinstance(d, Dim) else Dim(1) for d in resolved.axes))

    # ----- rows -------------------------------------------------------------------------------
    def _resolve_row(self, r: Row) -> Row:
        beg, dims, var = r.beg_dims, r.dims, r.row_var
        while var is not None and var in self._row_links:
            solution = self._row_links[var]
            beg, dims, var = beg + solution.beg_dims, solution.dims + dims, solution.row_var
        return Row(dims, var, beg_dims=beg)

    def _row_entry(self, v: RowVar) -> _RowBounds:
        return self._row_bounds.setdefault(v, _RowBounds())

    def _pair_suffixes(self, c: Constraint, kind: type, left: Row, right: Row) -> int:
        """Relate the right-aligned common suffix of two rows axis by axis; returns its length."""
        common = min(len(left.dims), len(right.dims))
        for i in range(1, common + 1):
            self._derive(c, kind, left.dims[-i], right.dims[-i])
        return common

    def _row_eq(self, c: RowEq) -> None:
        a, b = self._resolve_row(c.left), self._resolve_row(c.right)
        if a.beg_dims or b.beg_dims:
            self._row_eq_inside(c, a, b)
            return
        common = self._pair_suffixes(c, DimEq, a, b)
        rest_a = Row(a.dims[: len(a) - common], a.row_var)
        rest_b = Row(b.dims[: len(b) - common], b.row_var)
        if rest_a.dims or rest_b.dims:
            short, long = (rest_b, rest_a) if rest_a.dims else (rest_a, rest_b)
            if short.row_var is None:
                self._fail(c, f"[{self._show(a)}] and [{self._show(b)}] differ in their axes")
            self._solve_row(short.row_var, long, c)
        elif a.row_var != b.row_var:
            if a.row_var is not None and b.row_var is not None:
                low, high = sorted((a.row_var, b.row_var), key=lambda v: v.id)
                self._solve_row(high, Row((), low), c)
            else:
                var = a.row_var or b.row_var
                assert var is not None
                self._solve_row(var, Row(), c)

    def _row_ineq(self, c: RowIneq) -> None:
        cur, subr = self._resolve_row(c.cur), self._resolve_row(c.subr)
        if cur.beg_dims or subr.beg_dims:
            self._row_ineq_inside(c, cur, subr)
            return
        common = self._pair_suffixes(c, DimIneq, cur, subr)
        cur_rest = cur.dims[: len(cur) - common]
        subr_rest = subr.dims[: len(subr) - common]
        if subr_rest:  # cur must gain axes: forced, so not a guess
            if cur.row_var is None:
                self._fail(c, f"[{self._show(cur)}] has fewer axes than [{self._show(subr)}]")
            if cur.row_var == subr.row_var:
                self._fail(c, "a row cannot have more axes than itself")
            grown = Row(tuple(DimVar.fresh() for _ in subr_rest), RowVar.fresh())
            self._solve_row(cur.row_var, grown, c)
            self._derive(c, RowIneq, grown, Row(subr_rest, subr.row_var))
        elif subr.row_var is None:
            return
        elif cur.row_var is None:
            self._add_row_upper(subr.row_var, Row(cur_rest), c)
        elif not cur_rest:
            self._add_row_bound(cur.row_var, subr.row_var, c)
        else:  # ..a.. X >= ..b..: b may be shorter than X or reach into a; wait
            waiting = self._make(c, RowIneq, Row(cur_rest, cur.row_var), Row((), subr.row_var))
            self._stick(waiting, (cur.row_var, subr.row_var))

    # ----- rows whose variable has axes on its left (beginning axes) --------------------------
    def _row_eq_inside(self, c: RowEq, a: Row, b: Row) -> None:
        """``a = b`` when a row variable stands inside a row: end axes pair from the right,
        beginning axes from the left; a closed side then gives the row variable its middle.
        Two open rows with axes left over on opposite ends wait (either variable may be the
        longer one)."""
        common = self._pair_suffixes(c, DimEq, a, b)
        a_end, b_end = a.dims[: len(a.dims) - common], b.dims[: len(b.dims) - common]
        if a.row_var is None or b.row_var is None:
            closed, rest, other, other_end = (
                (a, a_end, b, b_end) if a.row_var is None else (b, b_end, a, a_end)
            )
            assert other.row_var is not None
            if other_end or len(rest) < len(other.beg_dims):
                self._fail(
                    c,
                    f"[{self._show(closed)}] has {_axes(len(closed))}, "
                    f"[{self._show(other)}] needs at least {len(other)}",
                )
            for left, right in zip(other.beg_dims, rest, strict=False):
                self._derive(c, DimEq, left, right)
            self._solve_row(other.row_var, Row(rest[len(other.beg_dims) :]), c)
            return
        start = min(len(a.beg_dims), len(b.beg_dims))
        for left, right in zip(a.beg_dims[:start], b.beg_dims[:start], strict=True):
            self._derive(c, DimEq, left, right)
        rest_a = Row(a_end, a.row_var, beg_dims=a.beg_dims[start:])
        rest_b = Row(b_end, b.row_var, beg_dims=b.beg_dims[start:])
        if a.row_var == b.row_var:
            if len(rest_a) != len(rest_b):
                self._fail(c, "a row cannot equal itself with more axes")
            if len(rest_a):  # the same axes shifted: wait until the variable is known
                self._stick(self._make(c, RowEq, rest_a, rest_b), (a.row_var,))
        elif not len(rest_a) and not len(rest_b):
            low, high = sorted((a.row_var, b.row_var), key=lambda v: v.id)
            self._solve_row(high, Row((), low), c)
        elif not len(rest_b):
            self._solve_row(b.row_var, rest_a, c)
        elif not len(rest_a):
            self._solve_row(a.row_var, rest_b, c)
        else:
            self._stick(self._make(c, RowEq, rest_a, rest_b), (a.row_var, b.row_var))

    def _row_ineq_inside(self, c: RowIneq, cur: Row, subr: Row) -> None:
        """``cur >= subr`` when a row variable stands inside a row. Broadcasting is NumPy's
        whatever the notation: ``subr``'s axes align with ``cur``'s from the right and it may
        lack leading ones, so beginning axes have no fixed partner until the row variables'
        lengths are known. Growth is still forced where ``cur`` must be longer: the axes
        ``subr`` has beyond ``cur``'s end axes lie in ``cur``'s variable as far as its
        beginning axes cannot hold them."""
        common = self._pair_suffixes(c, DimIneq, cur, subr)
        cur_end, subr_end = cur.dims[: len(cur.dims) - common], subr.dims[: len(subr.dims) - common]
        rest_cur = Row(cur_end, cur.row_var, beg_dims=cur.beg_dims)
        rest_subr = Row(subr_end, subr.row_var, beg_dims=subr.beg_dims)
        waiting = self._make(c, RowIneq, rest_cur, rest_subr)
        if cur.row_var is None:  # then subr has the beginning axes
            assert subr.row_var is not None
            if subr_end or len(cur_end) < len(subr.beg_dims):
                self._fail(c, f"[{self._show(cur)}] has fewer axes than [{self._show(subr)}]")
            if len(cur_end) == len(subr.beg_dims):  # no room left for subr's variable
                self._solve_row(subr.row_var, Row(), c)
                self._queue.append(waiting)
            else:
                self._stick(waiting, (subr.row_var,))
            return
        if cur.row_var == subr.row_var:
            if not len(rest_subr) and not len(rest_cur):
                return
            if not len(rest_cur):
                self._fail(c, "a row cannot have more axes than itself")
            self._stick(waiting, (cur.row_var,))  # the alignment needs the variable's length
            return
        if subr_end:  # cur_end is empty: cur's variable holds what its beginning cannot
            grow = min(len(subr_end), len(subr.beg_dims) + len(subr_end) - len(cur.beg_dims))
            if grow > 0:
                grown = Row(tuple(DimVar.fresh() for _ in range(grow)), RowVar.fresh())
                self._solve_row(cur.row_var, grown, c)
                self._queue.append(waiting)
                return
        elif subr.row_var is None:
            return  # subr's axes are all paired: the rest of cur broadcasts
        self._stick(waiting, (cur.row_var, subr.row_var))

    def _add_row_upper(self, v: RowVar, upper: Row, c: Constraint) -> None:
        if not upper.dims:
            self._solve_row(v, Row(), c)
            return
        bounds = self._row_entry(v)
        if any(
            len(u) == len(upper) and all(map(same_dim, u.dims, upper.dims))
            for u, _ in bounds.uppers
        ):
            return
        bounds.uppers.append((upper, c))
        for w in bounds.subr:
            self._derive(c, RowIneq, upper, Row((), w))

    def _add_row_bound(self, cur: RowVar, subr: RowVar, c: Constraint) -> None:
        if cur == subr:
            return
        above = self._row_entry(cur)
        if subr in above.subr:
            return
        above.subr[subr] = c
        self._row_entry(subr).cur[cur] = c
        for upper, origin in above.uppers:
            self._derive(origin, RowIneq, upper, Row((), subr))

    def _solve_row(self, v: RowVar, value: Row, c: Constraint | None) -> None:
        """Substitute ``value`` for ``v`` and re-state everything that was known about ``v``."""
        if value.row_var == v:
            if len(value):
                assert c is not None
                self._fail(c, "a row cannot equal itself with more axes")
            return
        if value.row_var is not None:
            depth = self._depth.get(v, 0) + len(value)
            if depth > self._axes_needed:
                assert c is not None
                self._fail(
                    c, "rows keep gaining axes: a cycle requires a row to be longer than itself"
                )
            self._depth[value.row_var] = max(self._depth.get(value.row_var, 0), depth)
        bounds = self._row_bounds.pop(v, None)
        self._row_links[v] = Row(
            tuple(self._owned(d, c) for d in value.dims),
            value.row_var,
            beg_dims=tuple(self._owned(d, c) for d in value.beg_dims),
        )
        alone = Row((), v)
        if bounds is not None:
            for u, origin in bounds.cur.items():
                del self._row_bounds[u].subr[v]
                self._derive(origin, RowIneq, Row((), u), alone)
            for w, origin in bounds.subr.items():
                del self._row_bounds[w].cur[v]
                self._derive(origin, RowIneq, alone, Row((), w))
            for upper, origin in bounds.uppers:
                self._derive(origin, RowIneq, upper, alone)
        self._wake(v)

    def _owned(self, d: DimLike, cause: Constraint | None) -> DimLike:
        """A variable standing for ``d``, so that a label inferred later reaches every use."""
        if isinstance(d, DimVar):
            return d
        owner = DimVar.fresh()
        self._dim_links[owner] = d
        if cause is not None:
            self._causes[owner] = cause
        return owner

    # ----- waiting constraints ----------------------------------------------------------------
    def _stick(self, c: Constraint, variables: tuple[DimLike | RowVar | None, ...]) -> None:
        """Park ``c`` until one of ``variables`` is solved."""
        key = next(self._stuck_keys)
        self._stuck[key] = c
        for v in variables:
            if isinstance(v, RowVar):
                self._row_entry(v)
            elif isinstance(v, DimVar):
                self._dim_entry(v)
            if v is not None:
                self._watchers.setdefault(v, []).append(key)  # type: ignore[arg-type]

    # ----- Total_elems and batch slices -------------------------------------------------------
    def _total_elems(self, c: TotalElems) -> None:
        row = self._resolve_row(c.row)
        known, unknown = 1, []
        for d in row.axes:
            rep = self._rep(d)
            value = self._value(rep)
            if value is not None:
                known *= value.size
            elif isinstance(rep, DimVar):
                unknown.append(rep)
        if known == 0 or c.total % known:
            if known != 0 or c.total != 0:
                self._fail(
                    c, f"{c.total} elements do not fit axes whose known sizes multiply to {known}"
                )
            return
        if row.row_var is None and not unknown:
            if known != c.total:
                self._fail(c, f"the axes hold {known} elements, not {c.total}")
        elif row.row_var is None and len(unknown) == 1:
            self._solve_dim(unknown[0], Dim(c.total // known, proj_id=fresh_id()), c)
        else:
            self._stick(c, (row.row_var, *unknown))

    def _row_slice(self, c: RowSlice) -> None:
        full, rest = self._resolve_row(c.full), self._resolve_row(c.rest)
        if full.beg_dims or rest.beg_dims:  # full is one fresh axis followed by rest
            axis = (DimVar.fresh(),)
            sliced = (
                Row(axis + rest.dims)
                if rest.row_var is None
                else Row(rest.dims, rest.row_var, beg_dims=axis + rest.beg_dims)
            )
            self._derive(c, RowEq, full, sliced)
            return
        common = self._pair_suffixes(c, DimEq, full, rest)
        full_rest = full.dims[: len(full) - common]
        rest_rest = rest.dims[: len(rest) - common]
        if rest_rest:  # the sliced row needs more axes
            if full.row_var is None or full.row_var == rest.row_var:
                self._fail(c, f"[{self._show(full)}] has no axis left to slice off")
            grown = Row(tuple(DimVar.fresh() for _ in rest_rest), RowVar.fresh())
            self._solve_row(full.row_var, grown, c)
            self._derive(c, RowSlice, grown, Row(rest_rest, rest.row_var))
        elif full.row_var is None:
            if not full_rest:
                self._fail(c, f"[{self._show(full)}] has no axis left to slice off")
            self._derive(c, RowEq, Row(full_rest[1:]), Row((), rest.row_var))
        elif rest.row_var is None:
            if len(full_rest) > 1:
                self._fail(
                    c, f"[{self._show(full)}] has more than one axis beyond [{self._show(rest)}]"
                )
            self._solve_row(full.row_var, Row(() if full_rest else (DimVar.fresh(),)), c)
        else:
            full, rest = Row(full_rest, full.row_var), Row((), rest.row_var)
            for other in self._stuck.values():  # slicing is a function: same row, same rest
                if isinstance(other, RowSlice) and self._same_row(
                    self._resolve_row(other.full), full
                ):
                    self._derive(c, RowEq, other.rest, rest)
            self._stick(self._make(c, RowSlice, full, rest), (full.row_var, rest.row_var))

    def _same_row(self, a: Row, b: Row) -> bool:
        return (
            a.row_var == b.row_var
            and len(a.beg_dims) == len(b.beg_dims)
            and len(a) == len(b)
            and all(
                same_dim(self._rep(x), self._rep(y)) for x, y in zip(a.axes, b.axes, strict=True)
            )
        )

    # ----- finalisation stages: each decides on all eligible variables at once ----------------
    def _merge_cycles(self) -> bool:
        graph = {v: bounds.subr for v, bounds in self._row_bounds.items()}
        cycles = strongly_connected(graph)
        for first, *others in cycles:
            for other in others:
                origin = next(iter(graph[other].values()))
                self._derive(origin, RowEq, Row((), first), Row((), other))
        return self._merge_dim_cycles() or bool(cycles)

    def _close_slices(self) -> bool:
        """Pending slices connected through shared rows fix each row's length relative to the
        others; the shortest rows of a group get no further axes, the slices do the rest."""
        links: dict[RowVar, list[tuple[RowVar, int]]] = {}
        for c in self._stuck.values():
            if isinstance(c, RowSlice):
                full, rest = self._resolve_row(c.full), self._resolve_row(c.rest)
                assert full.row_var is not None and rest.row_var is not None
                longer = len(full) - len(rest) - 1  # length(rest var) - length(full var)
                links.setdefault(full.row_var, []).append((rest.row_var, longer))
                links.setdefault(rest.row_var, []).append((full.row_var, -longer))
        groups: list[list[RowVar]] = []  # the shortest rows of each connected group
        seen: set[RowVar] = set()
        for start in links:
            if start in seen:
                continue
            offsets = {start: 0}
            todo = [start]
            while todo:
                v = todo.pop()
                for w, step in links[v]:
                    if w not in offsets:
                        offsets[w] = offsets[v] + step
                        todo.append(w)
            seen.update(offsets)
            least = min(offsets.values())
            groups.append([v for v, offset in offsets.items() if offset == least])
        above = self._rows_above_others()
        chosen = [g for g in groups if above.isdisjoint(g)] or groups  # growth from below first
        for group in chosen:
            for v in group:
                self._solve_row(v, Row(), None)
        return bool(chosen)

    def _assign_row_lubs(self) -> bool:
        counted = self._counted_rows()
        chosen = []
        for v, bounds in self._row_bounds.items():
            if not bounds.uppers:
                continue
            length: int | None = min(len(u) for u, _ in bounds.uppers)
            if v in counted:  # take only as much of the LUB as the count allows
                length = self._lub_length_holding(bounds, counted[v])
            if length is not None:
                chosen.append((v, length, bounds.uppers[0][1]))
        for v, length, origin in chosen:
            self._solve_row(v, Row(tuple(DimVar.fresh() for _ in range(length))), origin)
        return bool(chosen)

    def _counted_rows(self) -> dict[RowVar, int | None]:
        """Row variables under a pending Total_elems: the elements they must hold, if known."""
        counted: dict[RowVar, int | None] = {}
        for c in self._stuck.values():
            if isinstance(c, TotalElems):
                row = self.row(c.row)
                if row.row_var is not None:
                    known = all(isinstance(d, Dim) for d in row.axes)
                    counted[row.row_var] = c.total // _product(row) if known else None
        return counted

    def _lub_length_holding(self, bounds: _RowBounds, total: int | None) -> int | None:
        """The length of the shortest right part of the LUB whose sizes multiply to ``total``."""
        longest = min(len(u) for u, _ in bounds.uppers)
        product = 1
        for length in range(longest + 1):
            if product == total:
                return length
            if length == longest:
                return None
            values = [self._value(self._rep(u.dims[-1 - length])) for u, _ in bounds.uppers]
            if any(value is None for value in values):
                return None
            sizes = {value.size for value in values if value is not None}
            product *= sizes.pop() if len(sizes) == 1 else 1
        return None

    def _rows_above_others(self) -> set[RowVar | None]:
        """Row variables with a row variable below them (``v >= w``, possibly with axes)."""
        above: set[RowVar | None] = {v for v, bounds in self._row_bounds.items() if bounds.subr}
        above.update(
            self._resolve_row(c.cur).row_var for c in self._stuck.values() if isinstance(c, RowIneq)
        )
        return above

    def _close_rows(self) -> bool:
        waiting: set[RowVar | None] = {v for v, bounds in self._row_bounds.items() if bounds.cur}
        for c in self._stuck.values():
            if isinstance(c, RowIneq):
                # a row waits below the row it broadcasts into; one with beginning axes has no
                # fixed place in it, so it closes first and the row above follows from it
                cur, subr = self._resolve_row(c.cur), self._resolve_row(c.subr)
                waiting.add(cur.row_var if subr.beg_dims else subr.row_var)
            elif isinstance(c, RowEq):
                # axes left over on opposite ends: the side with more of them closes first,
                # and the other variable takes the difference
                a, b = self._resolve_row(c.left), self._resolve_row(c.right)
                waiting.add(a.row_var if len(a) < len(b) else b.row_var)
        ready = [v for v in self._row_bounds if v not in waiting] or list(self._row_bounds)
        one_axis = set()
        for c in self._stuck.values():
            if isinstance(c, TotalElems):
                row = self.row(c.row)
                if all(isinstance(d, Dim) for d in row.axes) and _product(row) != c.total:
                    one_axis.add(row.row_var)
        for v in ready:
            self._solve_row(v, Row((DimVar.fresh(),) if v in one_axis else ()), None)
        return bool(ready)

    def _default_dims(self) -> bool:
        keep = set()
        for c in self._stuck.values():
            if isinstance(c, TotalElems):
                unknown = [d for d in self.row(c.row).axes if isinstance(d, DimVar)]
                if len(set(unknown)) > 1:
                    keep.add(unknown[-1])  # the rightmost unknown takes what the others leave
        chosen = [v for v in self._dim_bounds if v not in keep] or list(self._dim_bounds)
        for v in chosen:
            self._solve_dim(v, Dim(1, proj_id=fresh_id()), None)
        return bool(chosen)

    # ----- messages ---------------------------------------------------------------------------
    def _show(self, r: Row) -> str:
        return str(self.row(r))

    def _describe(self, c: Constraint) -> str:
        if isinstance(c, RowEq):
            return f"[{self._show(c.left)}] = [{self._show(c.right)}]"
        if isinstance(c, RowIneq):
            return f"[{self._show(c.cur)}] >= [{self._show(c.subr)}]"
        if isinstance(c, TotalElems):
            return f"Total_elems [{self._show(c.row)}] = {c.total}"
        if isinstance(c, RowSlice):
            return f"[{self._show(c.rest)}] = [{self._show(c.full)}] without its leftmost axis"
        return super()._describe(c)


def _axes(count: int) -> str:
    return f"{count} axis" if count == 1 else f"{count} axes"


def _product(row: Row) -> int:
    total = 1
    for d in row.axes:
        assert isinstance(d, Dim)
        total *= d.size
    return total


_ROW_FIELDS: dict[type, tuple[str, ...]] = {
    RowEq: ("left", "right"),
    RowIneq: ("cur", "subr"),
    RowSlice: ("full", "rest"),
    TotalElems: ("row",),
}

_HANDLERS: dict[type, Callable[[Solver, Any], None]] = {
    DimEq: Solver._dim_eq,
    DimIneq: Solver._dim_ineq,
    RowEq: Solver._row_eq,
    RowIneq: Solver._row_ineq,
    TotalElems: Solver._total_elems,
    RowSlice: Solver._row_slice,
}
