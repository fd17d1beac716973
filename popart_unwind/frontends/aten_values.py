"""ATen converters for values fixed at trace time (``arange``, ``full``, fills, uninitialised
tensors), which become Const tensors, and for trace-time checks, which become nothing.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.frontends.aten_table import converts


@converts("arange.start_step", "arange.default", "arange.start", "full.default",
          "scalar_tensor.default", "zeros.default", "ones.default")
def _static(ctx, node, args, kwargs):
    """Values fixed at trace time: evaluated now, kept as a Const tensor."""
    return ctx.static_value(node)


@converts("zeros_like.default", "ones_like.default", "full_like.default")
def _filled_like(ctx, node, args, kwargs):
    """A tensor filled with one value: shapes are static, so it is a constant here."""
    kind = str(node.target).split(".")[1]
    fill = {"zeros_like": 0, "ones_like": 1}.get(kind)
    if fill is None:
        fill = args[1]
    array = np.full(ctx.out_shape(node), fill, dtype=ctx.out_dtype(node))
    return ctx.graph.add_constant(ctx.graph.unique_id(node.name), array)


@converts("empty.memory_format", "empty_like.default", "empty_permuted.default",
          "empty_strided.default", "new_empty.default", "new_empty_strided.default")
def _empty(ctx, node, args, kwargs):
    """Uninitialised memory, as a Const of zeros.

    Its contents are unspecified, so any fill is a valid value for it, but running the op
    (``torch.empty``) would put whatever bytes the allocator returned into the IR: the
    import, and every fold of those bytes, would differ from one run to the next (dropout's
    ``bernoulli(expand(empty([])), p)`` in a training step). Zeros make it a function of
    the model alone.
    """
    array = np.zeros(ctx.out_shape(node), dtype=ctx.out_dtype(node))
    return ctx.graph.add_constant(ctx.graph.unique_id(node.name), array)


@converts("_assert_tensor_metadata.default", "_assert_scalar.default",
          "sym_constrain_range_for_size.default")
def _assertion(ctx, node, args, kwargs):
    return None  # a trace-time check with no value; nothing to plan
