"""The unwinding problem (after poprithms' memory/unwind): an UnwindGraph of Sinks, Sources,
Barriers, FixedPoints, SumLike ops and view ops tied by ValuedPairs, its exact objective,
and solvers."""

from popart_unwind.unwind.graph import SumLikeOut, TensorId, UnwindGraph, ValuedPair
from popart_unwind.unwind.solution import Path, Solution, score

Graph = UnwindGraph  # the public name users import; code inside the package says UnwindGraph

__all__ = ["Graph", "Path", "Solution", "SumLikeOut", "TensorId", "UnwindGraph", "ValuedPair",
           "score"]
