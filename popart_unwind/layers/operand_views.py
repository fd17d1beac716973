"""A pass's operand as a view of the tensor it reads, and when two such views read the same
elements.

A layer's passes read one weight, one activation and one output gradient, each through
its own chain of views (reshapes, transposes; a recomputed clone or a value restored from a
pipeline's stash standing for its original). Following each operand back through the views
that neither drop nor repeat elements to a base tensor, and comparing the element
permutations the chains make, tells whether two ops read one cube tensor: the structure
the layer recognition (``fully_connected``, ``convolution``) pairs passes by.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from popart_unwind.ir.tensor import Tensor, TensorType
from popart_unwind.memory import Chain
from popart_unwind.ops.registry import OpRegistry
from popart_unwind.ops.stash import is_restore, is_stash
from popart_unwind.ops.views import ViewRule

#: Chain ops of a view that neither drops nor repeats elements.
BIJECTIVE_CHAIN_OPS = frozenset({"Reshape", "DimShuffle"})


@dataclasses.dataclass(frozen=True)
class OperandView:
    """An operand as a bijective view of ``base``: ``chain`` leads from the base's shape to
    the operand (a matmul's in its op's grouped orientation, [G, M, K] or [G, K, N])."""

    base: Tensor
    chain: Chain


def view_step(tensor: Tensor, registry: OpRegistry) -> tuple[Tensor, Chain] | None:
    """The tensor ``tensor``'s producer views bijectively, and the chain from it to
    ``tensor``; None if the producer is no such view."""
    op = tensor.producer
    if op is None or not op.has_input(0):
        return None
    rule = registry.layout_rule(op)
    source = op.input(0)
    if not isinstance(rule, ViewRule) or source.shape is None or tensor.shape is None:
        return None
    out_index = next(index for index, out in op.output_map().items() if out is tensor)
    chain = rule.view_chain(op, 0, out_index)
    if chain is None or any(step.type not in BIJECTIVE_CHAIN_OPS for step in chain.ops):
        return None
    return source, chain


def view_of(tensor: Tensor, registry: OpRegistry) -> OperandView:
    """``tensor`` as a bijective view of the furthest tensor reachable through views,
    recomputations and a pipeline's stashes (a recomputed result, or a value restored
    from a stash, stands for its original: the same values)."""
    pieces = []
    while True:
        step = view_step(tensor, registry)
        if step is not None:
            tensor, piece = step
            pieces.append(piece)
        elif (original := recomputed_original(tensor) or restored_original(tensor)) \
                is not None:
            tensor = original
        else:
            break
    chain = Chain(tensor.shape)
    for piece in reversed(pieces):
        chain = chain.then(piece)
    return OperandView(tensor, chain)


def recomputed_original(tensor: Tensor) -> Tensor | None:
    """The result ``tensor`` recomputes (ExplicitRecompute's clone records its original),
    or None."""
    op = tensor.producer
    if op is None or op.settings.recomputed_from < 0 \
            or not op.graph.has_op(op.settings.recomputed_from):
        return None
    original = op.graph.op(op.settings.recomputed_from)
    index = next(i for i, out in op.output_map().items() if out is tensor)
    return original.output(index) if original.has_output(index) else None


def restored_original(tensor: Tensor) -> Tensor | None:
    """The tensor whose stashed value ``tensor`` restores (a Restore reading a Stash), or
    None."""
    op = tensor.producer
    if op is None or not is_restore(op) or op.input(0).producer is None:
        return None
    stash = op.input(0).producer
    return stash.input(0) if is_stash(stash) else None


def permutation_form(chain: Chain) -> tuple | None:
    """A normal form of the element permutation a chain of Reshapes and DimShuffles makes:
    equal forms, equal permutations (chains from one shape to one shape). The tensor is cut
    into atoms — runs of axes that every reshape and shuffle keeps whole, split where a
    reshape cuts a dimension — and the form lists the atoms in the output's order, each by
    its place in the input's order and its size, neighbours that stay neighbours merged.
    None when a reshape cuts across atoms in a way no splitting expresses, a permutation in
    mixed radix (such views are not compared: no layer is recognised through them).
    Canonical chains are not enough: equal permutations can have different canonical
    chains (a transpose of merged heads against a split, shuffle and merge)."""
    memory: list[int] = []  # atom ids in the input's row-major order
    sizes: dict[int, int] = {}
    dims: list[list[int]] = []
    for size in chain.in_shape:
        atom = len(sizes)
        sizes[atom] = size
        memory.append(atom)
        dims.append([atom])
    for op in chain.ops:
        if op.type == "DimShuffle":
            dims = [dims[axis] for axis in op.attr]
            continue
        if op.type != "Reshape":
            return None
        atoms = _fused([atom for dim in dims for atom in dim], sizes, memory)
        dims = []
        for target in op.attr:
            dim: list[int] = []
            filled = 1
            while filled < target:
                atom = atoms.pop(0)
                if filled * sizes[atom] > target:
                    need = target // filled
                    if target % filled or sizes[atom] % need:
                        return None
                    atom = _split(atom, need, sizes, memory, atoms)
                dim.append(atom)
                filled *= sizes[atom]
            dims.append(dim)
    return _merged(memory, sizes, [atom for dim in dims for atom in dim])


def _fused(order: list[int], sizes: dict[int, int], memory: list[int]) -> list[int]:
    """``order`` (atoms in view order) with each atom that follows its predecessor both in
    the view and in memory fused into it: a reshape may then cut the fused atom anywhere."""
    fused: list[int] = []
    for atom in order:
        if fused and memory.index(atom) == memory.index(fused[-1]) + 1:
            sizes[fused[-1]] *= sizes.pop(atom)
            memory.remove(atom)
        else:
            fused.append(atom)
    return fused


def _split(atom: int, outer: int, sizes: dict[int, int], memory: list[int],
           pending: list[int]) -> int:
    """Split ``atom`` into an outer part of size ``outer`` and the inner rest (adjacent in
    memory, the outer first); return the outer part and put the inner one back in front of
    ``pending``."""
    inner = max(sizes) + 1
    sizes[inner] = sizes[atom] // outer
    sizes[atom] = outer
    memory.insert(memory.index(atom) + 1, inner)
    pending.insert(0, inner)
    return atom


def _merged(memory: list[int], sizes: dict[int, int], order: list[int]) -> tuple:
    """The atoms in ``order`` (output order) as (rank in memory, size), size-1 atoms
    dropped and neighbours adjacent in memory, in the same order, merged."""
    kept = [atom for atom in memory if sizes[atom] > 1]
    place = {atom: rank for rank, atom in enumerate(kept)}
    runs: list[list[int]] = []  # [first memory rank, last memory rank, size]
    for atom in order:
        if sizes[atom] == 1:
            continue
        rank = place[atom]
        if runs and runs[-1][1] + 1 == rank:
            runs[-1][1] = rank
            runs[-1][2] *= sizes[atom]
        else:
            runs.append([rank, rank, sizes[atom]])
    firsts = sorted(run[0] for run in runs)
    return tuple((firsts.index(run[0]), run[2]) for run in runs)


def equal_constants(first: Tensor, first_chain: Chain, second: Tensor,
                     second_chain: Chain) -> bool:
    """Whether two constants viewed as one cube tensor hold the same values: constant
    folding may give each pass its own copy of an output gradient that does not depend on
    the data (a loss summing the output makes it all ones)."""
    if first.data is None or second.data is None or first_chain.out_shape != \
            second_chain.out_shape or first.tensor_type is not TensorType.CONST \
            or second.tensor_type is not TensorType.CONST:
        return False
    return bool(np.array_equal(first_chain.apply(np.asarray(first.data)),
                               second_chain.apply(np.asarray(second.data))))
