// The unwinding Graph as the C++ core stores it: tensors in creation order, each with the
// kind of the op that makes it and that op's attributes, plus the ValuedPairs.
//
// It mirrors popart_unwind.unwind.Graph (which builds it) and popart_unwind/unwind/ops.py
// (the rules of each kind: forward edges and unwind routes), so that the solver here walks
// exactly the graph the Python reference walks.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "unwind_core/chain.hpp"

namespace popart_unwind::core {

enum class Kind { Sink, Source, Barrier, FixedPoint, SumLikeReduce, View, Concat, SumLike };

Kind kindFromName(const std::string &name);

struct Tensor {
  Kind kind;
  Shape shape;
  std::vector<int> inputs;
  Chain chain;                     // View: input -> output
  int axis = 0;                    // Concat
  std::vector<int> unwindIndices;  // SumLike
};

struct ValuedPair {
  int a, b;
  double value;
};

// How each element of a non-root output derives from one input element: the output's
// layout on `region` is `chain` applied to `src`'s layout.
struct Edge {
  int src;
  Chain chain;
  Region region;
};

class Graph {
public:
  int add(Tensor tensor); // returns the new tensor's index
  void addPair(int a, int b, double value) { pairs_.push_back({a, b, value}); }

  int size() const { return static_cast<int>(tensors_.size()); }
  const Tensor &tensor(int t) const { return tensors_[t]; }
  const Shape &shape(int t) const { return tensors_[t].shape; }
  Kind kind(int t) const { return tensors_[t].kind; }
  Index numel(int t) const { return core::numel(tensors_[t].shape); }
  const std::vector<int> &consumers(int t) const { return consumers_[t]; }
  const std::vector<ValuedPair> &pairs() const { return pairs_; }

  std::vector<Edge> forwardEdges(int t) const;
  // (input tensor, chain from the output back to it) for each way a layout wanted at `t`
  // can be given to an input.
  std::vector<std::pair<int, Chain>> unwindRoutes(int t) const;
  // The tensors `t`'s layout is made from through graph edges alone.
  std::vector<int> layoutInputs(int t) const;

private:
  std::vector<Tensor> tensors_;
  std::vector<std::vector<int>> consumers_;
  std::vector<ValuedPair> pairs_;
};

bool isRoot(Kind kind);          // source, barrier, fixed_point, sum_like_reduce
bool isDependentRoot(Kind kind); // barrier, sum_like_reduce

} // namespace popart_unwind::core
