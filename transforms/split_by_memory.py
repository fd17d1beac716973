"""SplitByMemory: our automatic split of a model over IPUs, balancing what each IPU holds.

For ``virtual_graph_mode = auto`` with ``auto_split = memory`` (the default; PopART's own
rule is AutoVirtualGraph, which the PopART baseline uses). Where it differs from PopART's:

- **what an IPU holds**: each weight counted once, on the IPU of its first forward reader
  (in a training step with a gradient per forward reader, live until the update); in a
  training step, each activation the backward pass reads, once, on its producer's IPU
  (PopART counts a weight once per reader, and an activation at both ends);
- **a tied weight stays with its readers**: when one weight is read at both ends of the
  forward pass (a tied embedding and LM head: readers more than half the pass apart), the
  ops from its last reader on (the head, the loss) join the IPU of its first reader, as
  Graphcore's published splits place a tied head, and so does every other op reading it
  (a T5 decoder's lookup of the table its encoder and head share: its result, a few
  rows, crosses instead of the table);
  PopART splits where the bytes fall and then copies the table every step;
- **the cut**: the forward ops between the table's reader and the head are divided into
  one contiguous run per IPU so that the largest IPU's bytes (the first IPU's including
  the head's) are as small as any such division makes them (binary search on the bound,
  each run filled greedily: exact for contiguous runs), and, within that bound, the IPUs'
  bytes as even as they can be (least sum of squares), cutting only where few bytes
  cross compared with the neighbourhood (a layer boundary, or a layer's residual sum: the
  hidden state and what every layer reads), never where a layer's wide intermediate
  results would cross.

A result made of weights alone (a traced linear layer's transposed weight) counts as its
weights and goes with the op reading it. The backward pass is placed as AutoVirtualGraph
places it (``SplitTransform``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from popart_unwind.errors import TransformError
from popart_unwind.ir.tensor import TensorType
from popart_unwind.ir.weights import is_weight_op, weight_derived, weights_read

from .auto_virtual_graph import ForwardSplitter, SplitTransform, nbytes, place_with_readers
from .registry import SPLIT_BY_MEMORY, register

if TYPE_CHECKING:
    from popart_unwind.ir import Op, Tensor
    from popart_unwind.options import SessionOptions

#: A cut may fall where the bytes crossing it are at most this many times the fewest of
#: any place near it.
CROSSING_SLACK = 1.5
#: The most places to cut the even split's dynamic programme weighs (its work grows with
#: their square); more are thinned evenly.
MAX_EVEN_CUTS = 400


@register
@dataclasses.dataclass(frozen=True)
class SplitByMemory(SplitTransform):
    """Place every main-graph op on one of ``SessionOptions.ipus`` IPUs, balancing the
    bytes each holds (module docstring). Does nothing unless ``virtual_graph_mode`` is
    ``auto`` and ``auto_split`` is ``memory``. Guarantees VGRAPH."""

    id = 12
    name = SPLIT_BY_MEMORY
    auto_split = "memory"

    def forward_split(self, options: SessionOptions) -> ForwardSplitter:
        return lambda forward, ids, training: split_by_memory(forward, ids, training,
                                                              options.ipus)


@dataclasses.dataclass(frozen=True)
class ForwardSplit:
    """The forward ops cut into the IPUs' runs: the ops before ``start`` and from ``head``
    on go to IPU 0 with the first run; ``cuts`` are the positions (into the forward ops)
    where each later IPU's run begins."""

    start: int
    head: int
    cuts: tuple[int, ...]

    def ipu_of(self, position: int) -> int:
        if position < self.start or position >= self.head:
            return 0
        return sum(1 for cut in self.cuts if cut <= position)


def split_by_memory(forward: list[Op], forward_ids: set[int], training: bool,
                    ipus: int) -> dict[int, int]:
    """op id -> IPU of each forward op (module docstring)."""
    if ipus == 1:
        return {op.id: 0 for op in forward}
    derived = weight_derived(forward)
    walked = [op for op in forward if not is_weight_op(op, derived)]
    tied = _tied_readers(walked, derived)
    span = (tied[0], tied[-1]) if tied else (-1, len(walked))
    split = choose_split(held_bytes(walked, forward_ids, training, derived),
                         crossing_bytes(walked), span, ipus)
    placement = {op.id: split.ipu_of(k) for k, op in enumerate(walked)}
    for k in tied:  # every other reader too (a T5 decoder's lookup of the shared table)
        placement[walked[k].id] = 0
    place_with_readers(forward, placement)
    return placement


def held_bytes(forward: list[Op], forward_ids: set[int], training: bool,
               derived: dict[str, tuple[Tensor, ...]]) -> list[int]:
    """What each forward op puts on its IPU: the weights it is the first to read (itself
    or through a transposed weight, ``derived``), in a training step with one gradient of
    the whole weight per forward reader (they live until the update at the step's end: a
    tied table has two and their sum), and in a training step its results the backward
    pass reads."""
    readers: dict[str, int] = {}
    for op in forward:
        for tensor in weights_read(op, derived):
            readers[tensor.id] = readers.get(tensor.id, 0) + 1
    seen: set[str] = set()
    held = []
    for op in forward:
        total = 0
        for tensor in weights_read(op, derived):
            if tensor.id not in seen:
                seen.add(tensor.id)
                total += nbytes(tensor) * (1 + readers[tensor.id] if training else 1)
        if training:
            total += sum(nbytes(t) for t in op.outputs
                         if any(r.id not in forward_ids for r in t.consumers))
        held.append(total)
    return held


def crossing_bytes(forward: list[Op]) -> list[int]:
    """Bytes of forward results made before each position and read from it on (what a cut
    there would copy); position 0 crosses nothing."""
    position = {op.id: k for k, op in enumerate(forward)}
    change = [0] * (len(forward) + 1)
    for k, op in enumerate(forward):
        for tensor in op.outputs:
            last = max((position[r.id] for r in tensor.consumers if r.id in position),
                       default=k)
            if last > k:
                change[k + 1] += nbytes(tensor)
                change[last + 1] -= nbytes(tensor)
    crossing, running = [], 0
    for k in range(len(forward)):
        running += change[k]
        crossing.append(running)
    return crossing


def _tied_readers(forward: list[Op], derived: dict[str, tuple[Tensor, ...]]
                  ) -> list[int]:
    """The forward positions reading the largest weight read at both ends of the forward
    pass (a tied embedding and head: its readers span more than half of it), in order;
    none when no weight is."""
    readers: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    for k, op in enumerate(forward):
        for tensor in weights_read(op, derived):
            if tensor.tensor_type is TensorType.VARIABLE:
                readers.setdefault(tensor.id, []).append(k)
                sizes[tensor.id] = nbytes(tensor)
    tied = [(sizes[t], t) for t, at in readers.items() if 2 * (at[-1] - at[0]) > len(forward)]
    if not tied:
        return []
    _, tensor = max(tied)
    return readers[tensor]


def choose_split(held: list[int], crossing: list[int], tied: tuple[int, int],
                 ipus: int) -> ForwardSplit:
    """The cut of the forward ops (``held`` bytes each, ``crossing`` bytes at each
    position) whose largest IPU holds least: IPU 0 keeps everything up to the tied
    weight's first reader and from its last reader on, the rest is cut into contiguous
    runs at positions where few bytes cross."""
    first, last = tied
    start, head = first + 1, last
    fixed = sum(held[:start]) + sum(held[head:])
    allowed = _allowed_cuts(crossing, start, head, ipus)
    if len(allowed) < ipus - 1:
        raise TransformError(f"SplitByMemory found {len(allowed)} places to cut the model "
                             f"(layer boundaries), too few for {ipus} IPUs")
    low, high = max([fixed, *held[start:head]], default=fixed), fixed + sum(held[start:head])
    while low < high:
        bound = (low + high) // 2
        if _greedy_cuts(held, allowed, start, head, fixed, bound, ipus) is None:
            low = bound + 1
        else:
            high = bound
    # the most even split within the bound, over at most MAX_EVEN_CUTS places (evenly
    # thinned beyond: quadratic work); else the greedy cut, which meets the bound
    step = -(-len(allowed) // MAX_EVEN_CUTS)
    cuts = _balanced_cuts(held, allowed[::step], start, head, fixed, low, ipus)
    if cuts is None:
        cuts = tuple(_greedy_cuts(held, allowed, start, head, fixed, low, ipus) or ())
    return ForwardSplit(start, head, cuts)


def _balanced_cuts(held: list[int], allowed: list[int], start: int, head: int, fixed: int,
                   bound: int, ipus: int) -> tuple[int, ...] | None:
    """Of the cuts keeping every IPU within ``bound``, the one whose IPUs' bytes have the
    least sum of squares (the most even), by dynamic programming over the allowed cuts;
    None when none is within the bound."""
    prefix = {start: 0}
    running = 0
    for k in range(start, head):
        running += held[k]
        prefix[k + 1] = running

    def load(a: int, b: int) -> int:
        return prefix[b] - prefix[a]

    # best[c] = (sum of squares, cuts) of IPUs 0..i-1 covering start..c, IPU i beginning at c
    best: dict[int, tuple[int, tuple[int, ...]]] = {}
    for cut in allowed:
        first = fixed + load(start, cut)
        if first <= bound:
            best[cut] = (first * first, (cut,))
    for _ in range(ipus - 2):
        after: dict[int, tuple[int, tuple[int, ...]]] = {}
        for cut in allowed:
            options = [(cost + load(begin, cut) ** 2, (*cuts, cut))
                       for begin, (cost, cuts) in best.items()
                       if begin < cut and load(begin, cut) <= bound]
            if options:
                after[cut] = min(options)
        best = after
    finished = [(cost + load(begin, head) ** 2, cuts) for begin, (cost, cuts) in best.items()
                if load(begin, head) <= bound]
    return min(finished)[1] if finished else None


def _allowed_cuts(crossing: list[int], start: int, head: int, ipus: int) -> list[int]:
    """The positions of the run range where a cut lets few bytes cross: at most
    ``CROSSING_SLACK`` times the fewest of any position within a window around it (an
    eighth of a run: a layer boundary is the narrowest point of its neighbourhood, and a
    classifier's small results at the end do not rule the layers' boundaries out). The
    first IPU's run may be empty when IPU 0 holds ops before the range (the table's
    reader)."""
    inside = list(range(max(start, 1), head))
    window = max(1, len(inside) // (8 * ipus))
    allowed = []
    for at, k in enumerate(inside):
        near = inside[max(0, at - window):at + window + 1]
        if crossing[k] <= CROSSING_SLACK * min(crossing[j] for j in near):
            allowed.append(k)
    return allowed


def _greedy_cuts(held: list[int], allowed: list[int], start: int, head: int, fixed: int,
                 bound: int, ipus: int) -> list[int] | None:
    """Runs filled in order, each as far as ``bound`` allows and ending at an allowed cut;
    the first IPU's run starts with ``fixed`` bytes. The cuts, or None when more than
    ``ipus`` runs would be needed. Each cut leaves enough allowed cuts for the IPUs after
    it, so that every IPU gets a run."""
    prefix = [0]
    for value in held[start:head]:
        prefix.append(prefix[-1] + value)

    def load(a: int, b: int) -> int:
        return prefix[b - start] - prefix[a - start]

    cuts: list[int] = []
    begin, carried = start, fixed
    for step in range(ipus - 1):
        spare = ipus - 2 - step  # allowed cuts the later IPUs still need
        usable = allowed[:len(allowed) - spare]
        fits = [k for k in usable if (k > begin or (k == begin and not step))
                and carried + load(begin, k) <= bound]
        if not fits:
            return None
        cut = fits[-1]
        cuts.append(cut)
        begin, carried = cut, 0
    if carried + load(begin, head) > bound:
        return None
    return cuts


def held_per_ipu(split: ForwardSplit, held: list[int], ipus: int) -> list[int]:
    """Bytes each IPU holds under ``split``: what the cut balances."""
    totals = [0] * ipus
    for k, value in enumerate(held):
        totals[split.ipu_of(k)] += value
    return totals
