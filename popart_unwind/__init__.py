"""popart-unwind: a layout planner for tile-based accelerators.

It decides which tile holds each element of every producer-less tensor of a model (weights,
inputs, constants, subgraph boundaries) by *unwinding* preferred layouts backwards through
view-changing ops, and writes the result as Poplar-format tile mappings.
"""

__version__ = "0.1.0"
