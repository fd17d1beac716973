"""The greedy canonicalization driver (after MLIR's greedy pattern rewrite driver): global
rules, folds and the registry's patterns, applied op by op from a worklist until nothing
changes or a cap is reached.

Iteration 1 visits every op in schedule order (reversed when ``top_down=False``). When a
rule changes the IR, the ops it touched (readers of changed tensors, producers of inputs,
ops created or changed in place) are revisited: in the same iteration if they existed when
it began and have not been visited yet, otherwise in the next one. So an iteration visits
each op at most once, and a pair of rules undoing each other shows up as iterations that
never run dry: the iteration cap catches it. Ops left without readers are erased at once.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable
from functools import partial
from typing import Any

from popart_unwind.errors import CanonicalizationError, IrError, PopartUnwindError
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.rewrite import global_rules
from popart_unwind.rewrite.constant_pool import is_constant
from popart_unwind.rewrite.rewriter import OpRegistryLike, Rewriter


@dataclasses.dataclass(frozen=True)
class CanonicalizeStats:
    """What a :func:`canonicalize` run did."""

    changed: bool
    iterations: int
    rewrites: int
    converged: bool
    #: (rule name, times applied), by name: patterns, ``fold(<op type>)`` and global rules.
    applied: tuple[tuple[str, int], ...] = ()


def canonicalize(graph_or_ir: Graph | Ir, registry: OpRegistryLike, *, max_iterations: int = 10,
                 max_rewrites: int = 100_000, test_convergence: bool = False,
                 top_down: bool = True, rewriter: Rewriter | None = None) -> CanonicalizeStats:
    """Apply global rules, fold hooks and patterns to a fixpoint on every graph given.

    Best effort: hitting a cap returns ``converged=False`` unless ``test_convergence`` asks
    for a CanonicalizationError. A graph's inputs and outputs are never removed. Every
    change goes through ``rewriter`` (the Canonicalize transform passes the one the
    registry made for it, so its record covers the run); without one a fresh one is made.
    """
    for what, value in (("max_iterations", max_iterations), ("max_rewrites", max_rewrites)):
        if type(value) is not int or value < 1:
            raise CanonicalizationError(f"{what} must be a positive int, got {value!r}")
    if rewriter is None:
        rewriter = Rewriter(registry)
    elif rewriter.registry is not registry:
        raise CanonicalizationError("the rewriter handed to canonicalize must use the op "
                                    "registry canonicalize is given")
    graphs = graph_or_ir.graphs if isinstance(graph_or_ir, Ir) else [graph_or_ir]
    driver = _Driver(registry, rewriter, max_rewrites, top_down)
    return driver.run(graphs, max_iterations, test_convergence)


def _alive(graph: Graph, op_id: int) -> Op | None:
    try:
        return graph.op(op_id)
    except IrError:
        return None


class _Driver:
    def __init__(self, registry: OpRegistryLike, rewriter: Rewriter, max_rewrites: int,
                 top_down: bool) -> None:
        self.registry = registry
        self.rewriter = rewriter
        rewriter.take_record()  # what it touched before this run is not this run's work
        self.max_rewrites = max_rewrites
        self.top_down = top_down
        self.rewrites = 0
        self.applied: dict[str, int] = {}
        self.capped = False
        self.recent: list[str] = []  # "rule on op" of the current iteration, for errors
        self.loose: dict[str, list[Tensor]] = {}

    # -- iterations ----------------------------------------------------------------------
    def run(self, graphs: list[Graph], max_iterations: int,
            test_convergence: bool) -> CanonicalizeStats:
        seeds: dict[str, set[int] | None] = {g.id: None for g in graphs}
        self.loose = {g.id: [t for t in g.tensors if is_constant(t)] for g in graphs}
        converged, iteration = False, 0
        while iteration < max_iterations and not self.capped:
            iteration += 1
            self.recent = []
            following: dict[str, set[int]] = {}
            for graph in graphs:
                if iteration == 1:
                    self._count(global_rules.UNIQUE_CONSTANTS,
                                global_rules.unique_constants(graph, self.rewriter))
                    self._take_loose(graph)
                following[graph.id] = self._drain(graph, seeds[graph.id])
            for graph in graphs:
                self._take_loose(graph)
                removed = global_rules.remove_dead_constants(graph, self.loose[graph.id],
                                                             self.rewriter)
                self.rewriter.take_record()
                self.loose[graph.id] = []
                self._count(global_rules.DEAD_CONSTANTS, removed)
            if not self.capped and not any(following.values()):
                converged = True
                break
            seeds = dict(following)
        if not converged and test_convergence:
            raise CanonicalizationError(self._non_convergence(iteration))
        return CanonicalizeStats(changed=self.rewrites > 0, iterations=iteration,
                                 rewrites=self.rewrites, converged=converged,
                                 applied=tuple(sorted(self.applied.items())))

    def _non_convergence(self, iteration: int) -> str:
        cap = (f"the rewrite cap ({self.max_rewrites})" if self.capped
               else f"the iteration cap ({iteration})")
        still = "; ".join(self.recent[:5]) or "nothing"
        more = f" and {len(self.recent) - 5} more" if len(self.recent) > 5 else ""
        return (f"canonicalization reached {cap} without a fixpoint; still rewriting: "
                f"{still}{more} (a rule is undoing another, or one never stops)")

    def _drain(self, graph: Graph, seeds: set[int] | None) -> set[int]:
        """One iteration on ``graph``; returns the ids of ops to visit in the next one."""
        schedule = graph.schedule()
        if not self.top_down:
            schedule.reverse()
        position = {op.id: k for k, op in enumerate(schedule)}
        ids = list(position) if seeds is None else [i for i in seeds if i in position]
        heap = [(position[i], i) for i in ids]
        heapq.heapify(heap)
        queued, visited, following = set(ids), set(), set()
        while heap and not self.capped:
            _, op_id = heapq.heappop(heap)
            op = _alive(graph, op_id)
            if op is None:
                continue
            visited.add(op_id)
            for other in self._visit(op):
                if other.graph is not graph or _alive(graph, other.id) is not other:
                    continue
                if other.id in position and other.id not in visited:
                    if other.id not in queued:
                        queued.add(other.id)
                        heapq.heappush(heap, (position[other.id], other.id))
                else:
                    following.add(other.id)
        return {i for i in following if _alive(graph, i) is not None}

    # -- one op --------------------------------------------------------------------------
    def _visit(self, op: Op) -> list[Op]:
        """Try the rules on ``op`` until one changes the IR; the ops that change touched."""
        opdef = self.registry.lookup(op)
        rewriter = self.rewriter
        rules: list[tuple[str, Callable[[], Any]]] = [
            (global_rules.TYPE_OUTPUTS,
             partial(global_rules.type_outputs, op, opdef, rewriter)),
            (global_rules.DEAD_CODE, partial(global_rules.erase_if_dead, op, opdef, rewriter)),
            (global_rules.fold_rule_name(op),
             partial(global_rules.apply_fold, op, opdef, rewriter)),
            (global_rules.COMMUTE, partial(global_rules.move_constant_right, op, opdef, rewriter)),
        ]
        rules += [(p.name, partial(p.match_and_rewrite, op, rewriter))
                  for p in self.registry.patterns_for(op) if p.roots_at(op)]
        touched: list[Op] = []
        for name, rule in rules:
            if self.rewrites >= self.max_rewrites:
                self.capped = True
                return touched
            if self._attempt(name, op, rule):
                if name != global_rules.TYPE_OUTPUTS:
                    return touched + self._after_change(name, op)
                touched += self._after_change(name, op)
                if _alive(op.graph, op.id) is not op:  # erased with readers left dead
                    return touched
                # typed, the op may now fold: the other rules go on
        return touched

    def _attempt(self, name: str, op: Op, rule: Callable[[], Any]) -> bool:
        """Run one rule and hold its claim of success against the rewriter's record."""
        label = op.debug_name()
        before = self.rewriter.changes
        try:
            claimed = bool(rule())
        except PopartUnwindError:
            raise
        except Exception as error:
            raise CanonicalizationError(f"{name} failed on op {label}: "
                                        f"{type(error).__name__}: {error}") from error
        changed = self.rewriter.changes != before
        if claimed and not changed:
            raise CanonicalizationError(f"pattern {name!r} reported success on op {label} "
                                        f"without changing the IR")
        if changed and not claimed:
            made = "; ".join(self.rewriter.log[:3])
            raise CanonicalizationError(f"pattern {name!r} changed the IR at op {label} "
                                        f"({made}) but reported no success")
        if changed:
            self._count(name, 1)
            self.recent.append(f"{name} on {label}")
        return changed

    def _after_change(self, name: str, op: Op) -> list[Op]:
        touched, modified, loose = self.rewriter.take_record()
        self.loose.setdefault(op.graph.id, []).extend(loose)
        for changed_op in modified:
            self._recheck(name, changed_op)
        return touched + self._erase_dead(touched)

    def _recheck(self, name: str, op: Op) -> None:
        """An op changed in place must still produce the dtypes and shapes it did."""
        if _alive(op.graph, op.id) is not op:
            return
        opdef = self.registry.lookup(op)
        if opdef is None or opdef.infer is None or any(t.shape is None for t in op.inputs):
            return
        try:
            inferred = opdef.infer(op)
        except PopartUnwindError as error:
            raise CanonicalizationError(f"pattern {name!r} left op {op.debug_name()} "
                                        f"inconsistent: {error}") from error
        for tensor, (dtype, shape) in zip(op.outputs, inferred, strict=False):
            if tensor.shape is not None and (tensor.dtype, tensor.shape) != (dtype, tuple(shape)):
                raise CanonicalizationError(
                    f"pattern {name!r} changed op {op.debug_name()} so that output "
                    f"{tensor.id!r} would be {dtype} {tuple(shape)}, not {tensor.dtype} "
                    f"{tensor.shape}")

    def _erase_dead(self, candidates: list[Op]) -> list[Op]:
        """Erase ops a change left unread, and then their producers likewise."""
        stack, touched = list(reversed(candidates)), []
        while stack:
            op = stack.pop()
            if _alive(op.graph, op.id) is not op:
                continue
            if not global_rules.is_dead(op, self.registry.lookup(op)):
                continue
            if self.rewrites >= self.max_rewrites:
                self.capped = True
                break
            self.rewriter.erase_op(op)
            self._count(global_rules.DEAD_CODE, 1)
            more, _, loose = self.rewriter.take_record()
            self.loose.setdefault(op.graph.id, []).extend(loose)
            touched += more
            stack += reversed(more)
        return touched

    def _take_loose(self, graph: Graph) -> None:
        self.loose[graph.id].extend(self.rewriter.take_record()[2])

    def _count(self, name: str, times: int) -> None:
        if times:
            self.rewrites += times
            self.applied[name] = self.applied.get(name, 0) + times
