"""Argument checks shared by every layer, raising the caller's typed error."""

from __future__ import annotations

from operator import index

from popart_unwind.errors import PopartUnwindError

#: A tensor shape: one non-negative size per axis.
Shape = tuple[int, ...]


def check_proportion(value: object, what: str, error: type[PopartUnwindError]) -> None:
    """``error`` naming ``what`` unless ``value`` is a number from 0 to 1 (not a bool)."""
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 <= value <= 1):
        raise error(f"{what} must be a number from 0 to 1; got {value!r}")


def as_shape(value: object, what: str, error: type[PopartUnwindError]) -> Shape:
    """``value`` as a tuple of ints >= 0, or ``error`` naming ``what`` and the value.

    Non-integers (2.5, "3") are refused rather than truncated.
    """
    if type(value) is tuple and all(type(d) is int and d >= 0 for d in value):
        return value  # the common, internal case: already a valid shape
    try:
        dims = tuple(index(d) for d in value)  # type: ignore[union-attr]
    except TypeError:
        raise error(f"{what} {value!r} must be a sequence of ints") from None
    if any(d < 0 for d in dims):
        raise error(f"{what} {dims} has a negative dimension")
    return dims
