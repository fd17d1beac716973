"""The unwinding problem (after poprithms' memory/unwind): a Graph of Sinks, Sources,
Barriers, FixedPoints, SumLike ops and view ops tied by ValuedPairs, its exact objective,
and solvers."""

from popart_unwind.unwind.graph import Graph, SumLikeOut, TensorId, ValuedPair
from popart_unwind.unwind.solution import Path, Solution, score

__all__ = ["Graph", "Path", "Solution", "SumLikeOut", "TensorId", "ValuedPair", "score"]
