"""Fixing an ONNX model's symbolic input dimensions before import.

PopART builds its graph for static shapes only (``InputShapeInfo`` gives the shapes a model
leaves open). Exporters name the dynamic axes they write (``dim_param``: ``batch``,
``sequence``), and one name usually stands for the same size in several inputs, so a size
can be given per name (``dims``, the command's ``--dim``) as well as a whole shape per
input (``input_shapes``, ``--input-shape``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from popart_unwind.errors import ModelImportError

if TYPE_CHECKING:
    import onnx


def fix_input_shapes(inputs: Mapping[str, onnx.ValueInfoProto],
                     input_shapes: Mapping[str, Sequence[int]],
                     dims: Mapping[str, int]) -> None:
    """Write the given shapes, then the given named dimensions, into the graph inputs'
    types (in place). Refuses a shape for what is not a graph input, a shape that does not
    fit the declared one, a dimension below 1, and a name no input's dimension carries."""
    named = {dim.dim_param for value in inputs.values() for dim in _dims(value)
             if dim.dim_param and not dim.HasField("dim_value")}
    for name, size in sorted(dims.items()):
        if name not in named:
            raise ModelImportError(f"a size is given for dimension {name!r}, which no graph "
                                   f"input has; symbolic dimensions are {sorted(named)}")
        if int(size) < 1:
            raise ModelImportError(f"the size given for dimension {name!r}, {size}, is below 1")
    for name, shape in sorted(input_shapes.items()):
        if name not in inputs:
            raise ModelImportError(f"a shape is given for {name!r}, which is not a graph "
                                   f"input; inputs are {sorted(inputs)}")
        _check_given_shape(inputs[name], [int(size) for size in shape])
        declared = inputs[name].type.tensor_type.shape
        declared.Clear()
        for size in shape:
            declared.dim.add().dim_value = int(size)
    for value in inputs.values():
        for dim in _dims(value):
            if not dim.HasField("dim_value") and dim.dim_param in dims:
                dim.dim_value = int(dims[dim.dim_param])  # clears dim_param (a oneof)


def _dims(value: onnx.ValueInfoProto) -> Sequence[onnx.TensorShapeProto.Dimension]:
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return ()
    return value.type.tensor_type.shape.dim


def _check_given_shape(value: onnx.ValueInfoProto, shape: list[int]) -> None:
    """A shape given for graph input ``value`` must fit what the model declares: as many
    dimensions, each positive, and equal to every dimension the model fixes (only
    symbolic or unknown ones are filled in)."""
    if any(size < 1 for size in shape):
        raise ModelImportError(f"the shape given for input {value.name!r}, {shape}, has a "
                               f"dimension below 1")
    tensor_type = value.type.tensor_type if value.type.HasField("tensor_type") else None
    if tensor_type is None or not tensor_type.HasField("shape"):
        return  # the model declares no shape: any is taken
    declared = [dim.dim_value if dim.HasField("dim_value") else
                (dim.dim_param or "?") for dim in tensor_type.shape.dim]
    if len(declared) != len(shape):
        raise ModelImportError(f"input {value.name!r} has {len(declared)} dimensions "
                               f"{declared}; the shape given for it, {shape}, has {len(shape)}")
    fixed = [(axis, size, given)
             for axis, (size, given) in enumerate(zip(declared, shape, strict=True))
             if isinstance(size, int) and size > 0 and size != given]
    if fixed:
        axis, size, given = fixed[0]
        raise ModelImportError(f"input {value.name!r} has dimension {axis} fixed at {size} "
                               f"{declared}; the shape given for it, {shape}, says {given}")
