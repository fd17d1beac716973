// Greedy0 (poprithms' algorithm) and the runs of the deferral heuristic, in C++.
//
// A faithful port of popart_unwind/unwind/greedy0.py: the same analysis, the same queue
// order (deferred last, then value, then the longest path to the end, then tensor ids),
// the same planting loops and the same choice of the sink to finalize when no pair can be
// unwound, so that both plant the same paths in the same order. The Python module's
// docstring explains the algorithm; the comments here only say where C++ differs in how,
// never in what.
#pragma once

#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "unwind_core/graph.hpp"

namespace popart_unwind::core {

// `dst`'s elements in `regions` take the mappings `chain` brings from `src`.
struct Path {
  int src, dst;
  Chain chain;
  Regions regions;
};

// What every greedy run needs to know about the graph, computed once.
struct Analysis {
  explicit Analysis(const Graph &graph);

  const Graph &graph;
  std::vector<int> length;                                // longest path to an output
  std::vector<std::vector<std::pair<int, Chain>>> back;   // (sink, chain to it) per tensor
  std::vector<std::vector<Edge>> forward;                 // each tensor's forward edges
  std::vector<std::vector<int>> ancestors;                // sorted sinks behind each tensor
  std::vector<int> sinks, dependentRoots, aimingRoots;
  std::vector<std::vector<std::pair<int, int>>> partners; // (other tensor, pair index)
  // Per dependent root: per pair, (value x elements, sinks behind the partner it aims at).
  std::map<int, std::vector<std::pair<double, std::vector<int>>>> aims;
  std::vector<std::vector<int>> rootsAfter;               // per sink
  std::map<int, std::pair<Index, Index>> pendingAtStart;  // per dependent root
};

struct RunResult {
  std::vector<Path> sinkPaths;
  std::set<int> blockers;
  std::set<int> lateSinks;
};

// One greedy run; `deferred` pairs (by index) are unwound only after every other queued
// pair, and `late` sinks are finalized only after every other one.
RunResult greedyRun(const Analysis &analysis, const std::set<int> &deferred,
                    const std::set<int> &late);

} // namespace popart_unwind::core
