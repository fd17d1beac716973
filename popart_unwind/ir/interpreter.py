"""One way to walk the IR: an interpreter base in the manner of torch.fx's ``Interpreter``.

Every analysis that visits the ops of an Ir — shape inference, the shape check, the planner's
emission of the unwinding problem, the cost model, the PopART baseline's global schedule —
derives from :class:`Interpreter`: it says what an op means to it (``run_op``) and what a
producer-less tensor starts as (``placeholder``), and the base walks the graphs in a
declared order, keeping each tensor's result in ``env``.

Two orders exist, because two kinds of analysis exist:

- ``CALLEES_FIRST``: each graph after every graph it calls (``Ir.callees_first``), so a call
  op finds its callees' results (the planner, the cost model);
- ``AT_FIRST_CALL``: the main graph first; before each call site runs, ``enter_call`` hears
  of every graph it calls (at every call site, so each can prepare its callee), and a callee
  not walked yet is walked then, before the op; then any graph not reached, in ``Ir.graphs``
  order (shape inference types a callee's inputs from its call sites; PopART's schedule
  places a callee's ops at its first call).
"""

from __future__ import annotations

from typing import Any, ClassVar

from popart_unwind.errors import IrError
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor

CALLEES_FIRST = "callees first"
AT_FIRST_CALL = "at first call"

#: Where a tensor's result is kept: (graph id, tensor id).
Key = tuple[str, str]


def key(tensor: Tensor) -> Key:
    return tensor.graph.id, tensor.id


class Interpreter:
    """Walks every graph of an Ir once, each graph's ops in schedule order.

    ``env`` maps each tensor (by ``key``) to its result: producer-less tensors get
    ``placeholder``'s, op outputs what ``run_op`` writes. With ``release_dead`` the result of
    a computed tensor is dropped once its last reader has run (graph outputs are kept, so
    callers find their callees' results), which bounds memory at real model sizes.
    """

    order: ClassVar[str] = CALLEES_FIRST
    release_dead: ClassVar[bool] = False

    def __init__(self) -> None:
        self.env: dict[Key, Any] = {}
        self._walked: set[str] = set()  # AT_FIRST_CALL: graphs entered so far
        self._uses_of: dict[str, dict[str, int]] = {}  # graph -> reads left per tensor

    # -- what an analysis says -------------------------------------------------------------
    def placeholder(self, tensor: Tensor) -> Any:
        """The result a producer-less tensor starts as (None: nothing is kept for it)."""
        return None

    def run_op(self, op: Op) -> None:
        """Interpret ``op``: read its inputs' results, write its outputs'."""
        raise NotImplementedError(f"{type(self).__name__} does not interpret ops")

    def enter_call(self, op: Op, callee: Graph) -> None:
        """``AT_FIRST_CALL`` only: call site ``op``, which calls ``callee``, is about to run
        (called at every call site; the callee is walked after the first)."""

    def released(self, key: Key) -> None:
        """``release_dead`` only: the result of ``key`` was dropped."""

    # -- results ---------------------------------------------------------------------------
    def read(self, tensor: Tensor) -> Any:
        try:
            return self.env[key(tensor)]
        except KeyError:
            raise self.missing(tensor) from None

    def write(self, tensor: Tensor, value: Any) -> None:
        self.env[key(tensor)] = value

    def missing(self, tensor: Tensor) -> Exception:
        """The error for reading a tensor that has no result yet."""
        return IrError(f"{tensor.describe()} is read before it has a result")

    # -- the walk --------------------------------------------------------------------------
    def run(self, ir: Ir) -> None:
        if self.order == CALLEES_FIRST:
            for graph in ir.callees_first():
                self.run_graph(graph)
            return
        for graph in ir.graphs:
            if graph.id not in self._walked:
                self.run_graph(graph)

    def run_graph(self, graph: Graph) -> None:
        if self.order == AT_FIRST_CALL:
            self._walked.add(graph.id)
        for tensor in graph.producerless_tensors():
            value = self.placeholder(tensor)
            if value is not None:
                self.write(tensor, value)
        uses = {t.id: t.num_uses() for t in graph.tensors} if self.release_dead else {}
        self._uses_of[graph.id] = uses
        outputs = set(graph.output_ids)
        for op in graph.schedule():
            if self.order == AT_FIRST_CALL:
                for callee in op.called_graphs():
                    self.enter_call(op, callee)
                    if callee.id not in self._walked:
                        self.run_graph(callee)
            self.run_op(op)
            if self.release_dead:
                self._release(op, uses, outputs)

    def last_read_by(self, op: Op, tensor: Tensor) -> bool:
        """``release_dead`` only, while ``op`` runs: whether no op after it reads ``tensor``
        (every use left is one of ``op``'s own)."""
        left = self._uses_of.get(op.graph.id, {}).get(tensor.id)
        return left is not None and left == sum(1 for t in op.inputs if t is tensor)

    def _release(self, op: Op, uses: dict[str, int], outputs: set[str]) -> None:
        for tensor in op.inputs:
            uses[tensor.id] -= 1
        for tensor in [*op.inputs, *op.outputs]:
            if (uses[tensor.id] == 0 and tensor.id not in outputs
                    and tensor.producer is not None and key(tensor) in self.env):
                del self.env[key(tensor)]
                self.released(key(tensor))
