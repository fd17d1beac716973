#include "unwind_core/graph.hpp"

#include <algorithm>
#include <stdexcept>

namespace popart_unwind::core {

Kind kindFromName(const std::string &name) {
  static const std::pair<const char *, Kind> kinds[] = {
      {"sink", Kind::Sink},     {"source", Kind::Source},
      {"barrier", Kind::Barrier}, {"fixed_point", Kind::FixedPoint},
      {"sum_like_reduce", Kind::SumLikeReduce}, {"view", Kind::View},
      {"concat", Kind::Concat}, {"sum_like", Kind::SumLike}};
  for (const auto &[text, kind] : kinds)
    if (name == text)
      return kind;
  throw std::invalid_argument("unknown unwinding op kind " + name);
}

bool isRoot(Kind kind) {
  return kind == Kind::Source || kind == Kind::Barrier || kind == Kind::FixedPoint ||
         kind == Kind::SumLikeReduce;
}

bool isDependentRoot(Kind kind) { return kind == Kind::Barrier || kind == Kind::SumLikeReduce; }

int Graph::add(Tensor tensor) {
  const int index = size();
  // Each op's output is a consumer of each distinct input once, in input order.
  std::vector<int> seen;
  for (int input : tensor.inputs) {
    if (input < 0 || input >= index)
      throw std::invalid_argument("Graph::add: input is not an earlier tensor");
    if (std::find(seen.begin(), seen.end(), input) == seen.end()) {
      seen.push_back(input);
      consumers_[input].push_back(index);
    }
  }
  tensors_.push_back(std::move(tensor));
  consumers_.emplace_back();
  return index;
}

namespace {
Region concatSlab(const Shape &out, int axis, Index start, Index size) {
  Shape lower(out.size(), 0), upper(out);
  lower[axis] = start;
  upper[axis] = start + size;
  return Region::box(out, lower, upper);
}
} // namespace

std::vector<Edge> Graph::forwardEdges(int t) const {
  const Tensor &node = tensors_[t];
  std::vector<Edge> edges;
  switch (node.kind) {
  case Kind::View:
    edges.push_back({node.inputs[0], node.chain, Region::full(node.shape)});
    break;
  case Kind::SumLike:
    edges.push_back({node.inputs[node.unwindIndices[0]], Chain(node.shape),
                     Region::full(node.shape)});
    break;
  case Kind::Concat: {
    Index start = 0;
    for (int input : node.inputs) {
      const Shape &in = shape(input);
      const Region slab = concatSlab(node.shape, node.axis, start, in[node.axis]);
      Chain chain(in);
      chain.append(fillOp(slab));
      edges.push_back({input, std::move(chain), slab});
      start += in[node.axis];
    }
    break;
  }
  default:
    break;
  }
  return edges;
}

std::vector<std::pair<int, Chain>> Graph::unwindRoutes(int t) const {
  const Tensor &node = tensors_[t];
  std::vector<std::pair<int, Chain>> routes;
  switch (node.kind) {
  case Kind::View:
    routes.emplace_back(node.inputs[0], unwindChain(node.chain));
    break;
  case Kind::SumLike:
    for (int i : node.unwindIndices)
      routes.emplace_back(node.inputs[i], Chain(node.shape));
    break;
  case Kind::Concat: {
    Index start = 0;
    for (int input : node.inputs) {
      const Index size = shape(input)[node.axis];
      Chain chain(node.shape);
      chain.append(sampleOp(concatSlab(node.shape, node.axis, start, size)));
      routes.emplace_back(input, std::move(chain));
      start += size;
    }
    break;
  }
  default:
    break;
  }
  return routes;
}

std::vector<int> Graph::layoutInputs(int t) const {
  const Tensor &node = tensors_[t];
  if (node.kind == Kind::SumLike)
    return {node.inputs[node.unwindIndices[0]]};
  if (node.kind == Kind::Sink || node.kind == Kind::Source || node.kind == Kind::FixedPoint)
    return {};
  std::vector<int> out;
  for (int input : node.inputs)
    if (std::find(out.begin(), out.end(), input) == out.end())
      out.push_back(input);
  return out;
}

} // namespace popart_unwind::core
