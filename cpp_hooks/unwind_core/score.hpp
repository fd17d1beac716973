// The objective of a solution, from regions and chains: the C++ counterpart of
// popart_unwind/unwind/symbolic.py (whose docstring explains why it is exact), with the
// dependency order of popart_unwind/unwind/solution.py that it needs.
#pragma once

#include <vector>

#include "unwind_core/greedy.hpp"

namespace popart_unwind::core {

// Tensors in an order where each comes after everything its layout depends on (its layout
// inputs, and for a sink the sources of its paths), the lowest index first among the
// ready ones. Throws std::domain_error naming the stuck tensors when there is a cycle.
std::vector<int> dependencyOrder(const Graph &graph, const std::vector<Path> &sinkPaths);

// For every tensor, the paths from roots (or sinks' own origins) that make its layout.
std::vector<std::vector<Path>> inwardPaths(const Graph &graph,
                                           const std::vector<Path> &sinkPaths);

// Sum over ValuedPairs of value x the number of indices where both have the same mapping.
double symbolicScore(const Graph &graph, const std::vector<std::vector<Path>> &inward);

} // namespace popart_unwind::core
