"""Laws of canonicalization on random programs: values are kept, twice is once, and the
result does not depend on the hash seed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.ir import Ir, OpType, Tensor
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import canonicalize

KINDS = ("transpose", "transpose_twice", "reshape", "unsqueeze", "squeeze", "add_zero",
         "zero_add", "mul_one", "const_add", "neg", "identity", "add_self", "slice_all", "fold",
         "cast", "wide_zero")


def make(graph, name, inputs, attributes=None, *, version=13):
    op = graph.create_op(OpType("ai.onnx", name, version), inputs, 1, attributes)
    for tensor, (dtype, shape) in zip(op.outputs, REGISTRY.lookup(op).infer(op), strict=True):
        tensor.dtype, tensor.shape = dtype, tuple(shape)
    return op.output(0)


def _const(graph, array):
    return graph.add_constant(graph.unique_id("k"), np.asarray(array))


def _step(graph, kind, tensor, draw):
    """One random op reading ``tensor``; returns its output."""
    shape, rank = tensor.shape, len(tensor.shape)
    if kind in ("transpose", "transpose_twice"):
        for _ in range(1 + (kind == "transpose_twice")):
            perm = draw(st.permutations(range(rank)))
            tensor = make(graph, "Transpose", [tensor], {"perm": list(perm)})
        return tensor
    if kind == "reshape":
        target = [-1, *shape[1:]][::-1] if rank > 1 else [1, -1]
        return make(graph, "Reshape", [tensor, _const(graph, np.array(target, np.int64))])
    if kind == "unsqueeze" and rank < 4:
        axis = draw(st.integers(-rank - 1, rank))
        return make(graph, "Unsqueeze", [tensor, _const(graph, np.array([axis], np.int64))])
    if kind == "squeeze" and 1 in shape:
        return make(graph, "Squeeze", [tensor, _const(graph, np.array([shape.index(1)]))])
    if kind in ("add_zero", "zero_add", "mul_one", "const_add", "wide_zero"):
        value = {"mul_one": 1.0, "const_add": 2.5}.get(kind, 0.0)
        wide = (2, *shape) if kind == "wide_zero" else ()
        const = _const(graph, np.full(wide, value, np.float32))
        name = "Mul" if kind == "mul_one" else "Add"
        left = kind in ("zero_add", "const_add")
        return make(graph, name, [const, tensor] if left else [tensor, const])
    if kind == "neg":
        return make(graph, "Neg", [tensor])
    if kind == "identity":
        return make(graph, "Identity", [tensor])
    if kind == "add_self":
        return make(graph, "Add", [tensor, tensor])
    if kind == "slice_all":
        ends = np.array([d + 5 for d in shape], np.int64)
        return make(graph, "Slice", [tensor, _const(graph, np.zeros(rank, np.int64)),
                                     _const(graph, ends)])
    if kind == "fold":
        const = _const(graph, np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
        folded = make(graph, "Mul", [const, const])
        return make(graph, "Sub", [tensor, folded])
    if kind == "cast":
        return make(graph, "Cast", [tensor], {"to": 1})
    return tensor


@st.composite
def programs(draw):
    ir = Ir()
    graph = ir.main_graph
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    tensors = [graph.add_input("x", "float32", shape)]
    for _ in range(draw(st.integers(1, 8))):
        chain = draw(st.booleans())  # mostly extend the last tensor, so views compose
        source = tensors[-1] if chain else tensors[draw(st.integers(0, len(tensors) - 1))]
        tensors.append(_step(graph, draw(st.sampled_from(KINDS)), source, draw))
    for tensor in {t.id: t for t in [tensors[-1], *draw(st.lists(st.sampled_from(tensors),
                                                                  max_size=2))]}.values():
        graph.mark_output(tensor)
    return ir


def evaluate(graph, feeds):
    """Run a graph with the ops' own fold hooks on concrete values (they are numpy)."""
    env = {t.id: t.data for t in graph.tensors if t.data is not None}
    env.update(feeds)
    for op in graph.schedule():
        inputs = op.input_map()
        values = [env[inputs[i].id] if i in inputs else None for i in range(max(inputs) + 1)]
        results = REGISTRY.lookup(op).fold(op, values)
        for tensor, value in zip(op.outputs, results, strict=True):
            env[tensor.id] = env[value.id] if isinstance(value, Tensor) else value
    return [env[t] for t in graph.output_ids]


@settings(max_examples=60, deadline=None)
@given(programs(), st.integers(0, 2**32 - 1))
def test_canonicalize_keeps_values_and_twice_is_once(ir, seed):
    graph = ir.main_graph
    feeds = {"x": np.random.default_rng(seed).normal(size=graph.tensor("x").shape)
             .astype(np.float32)}
    before = evaluate(graph, feeds)
    stats = canonicalize(ir, REGISTRY, test_convergence=True)
    assert stats.converged
    ir.verify()
    after = evaluate(graph, feeds)
    assert len(after) == len(before)
    for want, got in zip(before, after, strict=True):
        assert want.dtype == got.dtype and np.array_equal(want, got)
    once = ir.to_json(include_data=True)
    again = canonicalize(ir, REGISTRY, test_convergence=True)
    assert not again.changed and again.iterations == 1
    assert ir.to_json(include_data=True) == once


SCRIPT = textwrap.dedent("""
    import hashlib
    import numpy as np
    from popart_unwind.ir import Ir, OpType
    from popart_unwind.ops import REGISTRY
    from popart_unwind.rewrite import canonicalize

    ir = Ir()
    graph = ir.main_graph
    rng = np.random.default_rng(7)
    tensors = [graph.add_input("x", "float32", (2, 3))]
    for step in range(60):
        source = tensors[int(rng.integers(len(tensors)))]
        const = graph.add_constant(f"c{step}", np.full((), step % 3, np.float32))
        kind = ["Add", "Mul", "Transpose", "Neg"][step % 4]
        inputs = [source] if kind in ("Transpose", "Neg") else [const, source]
        attributes = {"perm": [1, 0]} if kind == "Transpose" else {}
        op = graph.create_op(OpType("ai.onnx", kind, 13), inputs, 1, attributes)
        [(dtype, shape)] = REGISTRY.lookup(op).infer(op)
        op.output(0).dtype, op.output(0).shape = dtype, shape
        tensors.append(op.output(0))
    for tensor in tensors[-5:]:
        graph.mark_output(tensor)
    stats = canonicalize(ir, REGISTRY)
    print(stats)
    print(hashlib.sha256(ir.to_json(include_data=True).encode()).hexdigest())
""")


def test_results_do_not_depend_on_the_hash_seed():
    outputs = set()
    for seed in ("0", "1", "12345"):
        run = subprocess.run([sys.executable, "-P", "-c", SCRIPT], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        outputs.add(run.stdout)
    assert len(outputs) == 1
    assert "converged=True" in outputs.pop()
