#include "unwind_core/score.hpp"

#include "unwind_core/fill_sample.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string>

namespace popart_unwind::core {

std::vector<int> dependencyOrder(const Graph &graph, const std::vector<Path> &sinkPaths) {
  const int n = graph.size();
  std::vector<std::vector<int>> deps(n);
  for (int t = 0; t < n; ++t)
    deps[t] = graph.layoutInputs(t);
  for (const Path &path : sinkPaths)
    deps[path.dst].push_back(path.src);
  std::vector<std::vector<int>> users(n);
  std::vector<int> waiting(n);
  for (int t = 0; t < n; ++t) {
    std::sort(deps[t].begin(), deps[t].end());
    deps[t].erase(std::unique(deps[t].begin(), deps[t].end()), deps[t].end());
    waiting[t] = static_cast<int>(deps[t].size());
    for (int need : deps[t])
      users[need].push_back(t);
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int t = 0; t < n; ++t)
    if (!waiting[t])
      ready.push(t);
  std::vector<int> order;
  while (!ready.empty()) {
    const int t = ready.top();
    ready.pop();
    order.push_back(t);
    for (int user : users[t])
      if (--waiting[user] == 0)
        ready.push(user);
  }
  if (static_cast<int>(order.size()) != n) {
    std::string stuck;
    int shown = 0;
    for (int t = 0; t < n && shown < 8; ++t)
      if (waiting[t] > 0) {
        stuck += (shown++ ? ", #" : "#") + std::to_string(t);
      }
    throw std::domain_error("invalid solution: layouts depend on themselves in a cycle "
                            "through " + stuck);
  }
  return order;
}

namespace {

Path identity(int t, const Shape &shape, Regions regions) {
  return Path{t, t, Chain(shape), std::move(regions)};
}

// `before` continued by `chain`, kept to `within`; nothing when nothing is left.
bool through(const Path &before, const Chain &chain, int dst, const Regions &within,
             std::vector<Path> &out) {
  Regions regions = chain.apply(before.regions).intersect(within);
  if (!regions.totalElms())
    return false;
  out.push_back(Path{before.src, dst, before.chain.then(chain).canonicalized(),
                     std::move(regions)});
  return true;
}

// Dense int64 arrays, to compare two different chains from one root element by element.
struct Array {
  Shape shape;
  std::vector<Index> data;
};

std::vector<Index> strides(const Shape &shape) {
  std::vector<Index> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

// Calls f(flat index, multi-index) for every element of `shape` in row-major order.
template <typename F> void forEach(const Shape &shape, F f) {
  const Index total = numel(shape);
  std::vector<Index> at(shape.size(), 0);
  for (Index flat = 0; flat < total; ++flat) {
    f(flat, at);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++at[d] < shape[d])
        break;
      at[d] = 0;
    }
  }
}

std::vector<std::vector<Index>> onsOf(const Region &region) {
  std::vector<std::vector<Index>> ons;
  for (const DimSet &d : region.dims())
    ons.push_back(d.ons());
  return ons;
}

Array applyOp(const Op &op, const Array &in) {
  Array out{op.out, std::vector<Index>(static_cast<std::size_t>(numel(op.out)), 0)};
  const std::vector<Index> inStrides = strides(in.shape);
  switch (op.type) {
  case OpType::Reshape:
    out.data = in.data;
    break;
  case OpType::DimShuffle:
    forEach(op.out, [&](Index flat, const std::vector<Index> &at) {
      Index source = 0;
      for (std::size_t d = 0; d < at.size(); ++d)
        source += at[d] * inStrides[op.axes[d]];
      out.data[flat] = in.data[source];
    });
    break;
  case OpType::Reverse:
    forEach(op.out, [&](Index flat, const std::vector<Index> &at) {
      Index source = 0;
      for (std::size_t d = 0; d < at.size(); ++d) {
        const bool flipped = std::binary_search(op.axes.begin(), op.axes.end(),
                                                static_cast<int>(d));
        source += (flipped ? in.shape[d] - 1 - at[d] : at[d]) * inStrides[d];
      }
      out.data[flat] = in.data[source];
    });
    break;
  case OpType::Expand:
    forEach(op.out, [&](Index flat, const std::vector<Index> &at) {
      Index source = 0;
      for (std::size_t d = 0; d < at.size(); ++d)
        source += (in.shape[d] == 1 ? 0 : at[d]) * inStrides[d];
      out.data[flat] = in.data[source];
    });
    break;
  case OpType::Reduce: {
    const std::vector<Index> outStrides = strides(op.out);
    forEach(in.shape, [&](Index flat, const std::vector<Index> &at) {
      Index target = 0;
      for (std::size_t d = 0; d < at.size(); ++d)
        target += (op.out[d] == 1 ? 0 : at[d]) * outStrides[d];
      out.data[target] += in.data[flat];
    });
    break;
  }
  case OpType::SettSample: {
    const auto ons = onsOf(op.region);
    forEach(op.out, [&](Index flat, const std::vector<Index> &at) {
      Index source = 0;
      for (std::size_t d = 0; d < at.size(); ++d)
        source += ons[d][at[d]] * inStrides[d];
      out.data[flat] = in.data[source];
    });
    break;
  }
  case OpType::SettFillInto: {
    const auto ons = onsOf(op.region);
    const std::vector<Index> outStrides = strides(op.out);
    forEach(in.shape, [&](Index flat, const std::vector<Index> &at) {
      Index target = 0;
      for (std::size_t d = 0; d < at.size(); ++d)
        target += ons[d][at[d]] * outStrides[d];
      out.data[target] = in.data[flat];
    });
    break;
  }
  }
  return out;
}

Array applyChain(const Chain &chain, Array array) {
  for (const Op &op : chain.ops())
    array = applyOp(op, array);
  return array;
}

// Where two different chains from one root bring the same root element, inside `common`.
Index agreeingElements(const Graph &graph, const Path &left, const Path &right,
                       const Regions &common) {
  Array ids{graph.shape(left.src), {}};
  for (Index i = 0; i < graph.numel(left.src); ++i)
    ids.data.push_back(i + 1);
  const Array a = applyChain(left.chain, ids), b = applyChain(right.chain, ids);
  const std::vector<Index> outStrides = strides(a.shape);
  Index same = 0;
  for (const Region &region : common.members()) {
    const auto ons = onsOf(region);
    Shape counts;
    for (const auto &o : ons)
      counts.push_back(static_cast<Index>(o.size()));
    forEach(counts, [&](Index, const std::vector<Index> &at) {
      Index flat = 0;
      for (std::size_t d = 0; d < at.size(); ++d)
        flat += ons[d][at[d]] * outStrides[d];
      same += a.data[flat] == b.data[flat];
    });
  }
  return same;
}

// Whether `chain` brings every element of `common` from the same index of its root: no op,
// or a fill then a sample that copies each of those indices from itself (a Concat's slab
// unwound into an input and concatenated again). Port of symbolic._keeps_place.
bool keepsPlace(const Chain &chain, const Regions &common) {
  const std::vector<Op> &ops = chain.ops();
  if (ops.empty())
    return true;
  if (ops.size() != 2 || ops[0].type != OpType::SettFillInto ||
      ops[1].type != OpType::SettSample || chain.inShape() != chain.outShape())
    return false;
  const Sources sources = fillSampleSources(ops[0].region, ops[1].region);
  for (const Region &region : common.members()) {
    const auto ons = onsOf(region);
    for (std::size_t d = 0; d < ons.size(); ++d)
      for (Index at : ons[d])
        if (sources[d][static_cast<std::size_t>(at)] != at)
          return false;
  }
  return true;
}

} // namespace

std::vector<std::vector<Path>> inwardPaths(const Graph &graph,
                                           const std::vector<Path> &sinkPaths) {
  std::vector<std::vector<const Path *>> into(graph.size());
  for (const Path &path : sinkPaths)
    into[path.dst].push_back(&path);
  std::vector<std::vector<Path>> inward(graph.size());
  for (int t : dependencyOrder(graph, sinkPaths)) {
    const Shape &shape = graph.shape(t);
    std::vector<Path> &found = inward[t];
    if (isRoot(graph.kind(t))) {
      found.push_back(identity(t, shape, Regions::of(Region::full(shape))));
    } else if (graph.kind(t) == Kind::Sink) {
      for (const Path *path : into[t])
        for (const Path &before : inward[path->src])
          through(before, path->chain, t, path->regions, found);
      std::vector<Region> covered;
      for (const Path &p : found)
        covered.insert(covered.end(), p.regions.members().begin(), p.regions.members().end());
      Regions own = subtractAll(Region::full(shape), covered);
      if (own.totalElms())
        found.push_back(identity(t, shape, std::move(own)));
    } else {
      for (const Edge &edge : graph.forwardEdges(t))
        for (const Path &before : inward[edge.src])
          through(before, edge.chain, t, Regions::of(edge.region), found);
    }
  }
  return inward;
}

double symbolicScore(const Graph &graph, const std::vector<std::vector<Path>> &inward) {
  double total = 0.0;
  for (const ValuedPair &pair : graph.pairs()) {
    Index agreeing = 0;
    for (const Path &left : inward[pair.a])
      for (const Path &right : inward[pair.b]) {
        if (left.src != right.src)
          continue;
        const Regions common = left.regions.intersect(right.regions);
        const Index count = common.totalElms();
        if (!count)
          continue;
        const bool same = left.chain == right.chain ||
                          (keepsPlace(left.chain, common) && keepsPlace(right.chain, common));
        agreeing += same ? count : agreeingElements(graph, left, right, common);
      }
    total += pair.value * static_cast<double>(agreeing);
  }
  return total;
}

} // namespace popart_unwind::core
