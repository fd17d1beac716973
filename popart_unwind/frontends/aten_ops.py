"""How each ATen op of a ``torch.export`` graph becomes IR ops, one converter per op.

The IR speaks ONNX's op vocabulary (PopART imports ONNX), so ATen ops are written as the
ONNX ops PopART would see for the same computation: ``view`` → Reshape, ``permute`` →
Transpose, ``addmm`` → MatMul + Add (PopART's Gemm decomposition), ``embedding`` → Gather,
advanced indexing (``index``) → Gather, ``slice_scatter`` → Concat of Slices,
``index_put`` with ``accumulate=True`` (an embedding's gradient) → ScatterND with reduction
"add", ``convolution_backward`` → ConvTranspose, Conv and ReduceSum (PopART's data-gradient
and weight-gradient convolutions), ``max_pool2d_with_indices`` → MaxPool and its backward →
ScatterElements.
Static values (``arange``, ``full``, scalars) become Const tensors. ATen ops with no ONNX
counterpart here (most backward kernels; any converter may decline by returning
``NotImplemented``) stay opaque ops in the ``aten`` domain, carrying
the shapes torch computed — the planner treats them as barriers, never as errors. A
converter writes an ATen op as other ops only when they compute exactly its values
(``index_put`` without accumulation, whose result torch leaves unspecified for duplicate
indices, stays opaque).

The converters live by what they convert (``aten_views``: views and indexing;
``aten_math``: matmuls, elementwise ops, norms, reductions; ``aten_conv``: convolutions and
pools; ``aten_values``: trace-time values); this module loads them into the one table,
``aten_table.CONVERTERS``.
"""

from popart_unwind.frontends import (  # noqa: F401  (imported to enter their converters)
    aten_conv,
    aten_math,
    aten_values,
    aten_views,
)
from popart_unwind.frontends.aten_table import CONVERTERS, Converter, converts

__all__ = ["CONVERTERS", "Converter", "converts"]
