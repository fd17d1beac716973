// The canonicalizer's single-op, merge and pair rules and its driver (see the header).
#include "unwind_core/canonical.hpp"

#include <algorithm>
#include <iterator>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "unwind_core/canonical_swaps.hpp"
#include "unwind_core/fill_sample.hpp"

namespace popart_unwind::core {

namespace {

using Ops = std::vector<Op>;

// A one-op list without the copy an initializer list would make.
Ops single(Op op) {
  Ops ops;
  ops.push_back(std::move(op));
  return ops;
}

// ----- 3. cancellations and pair normal forms --------------------------------------------
bool containsAll(const Region &region, const Regions &regions) {
  for (const Region &member : regions.members()) {
    if (member.empty())
      continue;
    if (region.empty())
      return false;
    for (std::size_t d = 0; d < member.dims().size(); ++d)
      if (!region.dims()[d].contains(member.dims()[d]))
        return false;
  }
  return true;
}

// Sampling k broadcast copies of an axis is broadcasting it to k copies.
std::optional<Ops> sampleFewerCopies(const Op &expand, const Op &sample) {
  const std::vector<Index> counts = sample.region.nelms();
  std::vector<int> partial;
  for (int a : resizedAxes(expand))
    if (counts[a] != expand.out[a])
      partial.push_back(a);
  if (partial.empty())
    return std::nullopt;
  Shape target = expand.out;
  Dims dims = sample.region.dims();
  for (int a : partial) {
    target[a] = counts[a];
    dims[a] = DimSet::full(counts[a]);
  }
  Ops ops;
  ops.push_back(shapeOp(OpType::Expand, expand.in, target));
  ops.push_back(sampleOpAt(target, Region(target, std::move(dims))));
  return ops;
}

// Reversing an axis an Expand broadcast reorders copies of one element: nothing.
std::optional<Ops> reverseOfCopies(const Op &expand, const Op &reverse) {
  const std::vector<int> copies = resizedAxes(expand);
  std::vector<int> kept;
  for (int axis : reverse.axes)
    if (std::find(copies.begin(), copies.end(), axis) == copies.end())
      kept.push_back(axis);
  if (kept.size() == reverse.axes.size())
    return std::nullopt;
  Ops ops;
  ops.push_back(expand);
  if (!kept.empty())
    ops.push_back(reverseOp(reverse.in, std::move(kept)));
  return ops;
}

bool needsReaching(const Op &first, const Op &second) {
  return first.type == OpType::SettSample && second.type == OpType::SettFillInto &&
         first.region.sameSet(second.region);
}

bool sameOps(Ops::const_iterator begin, Ops::const_iterator end, const Ops &other) {
  return static_cast<std::size_t>(std::distance(begin, end)) == other.size() &&
         std::equal(begin, end, other.begin());
}

std::optional<Ops> normalisePair(const Op &first, const Op &second, const Regions *reaching) {
  if (first.type == OpType::SettFillInto && second.type == OpType::SettSample) {
    Ops ops = fillSampleOps(first.in, fillSampleSources(first.region, second.region));
    if (ops.size() == 2 && ops[0] == first && ops[1] == second)
      return std::nullopt;
    return ops;
  }
  if (first.type == OpType::Expand && second.type == OpType::SettSample)
    return sampleFewerCopies(first, second);
  if (first.type == OpType::Expand && second.type == OpType::Reverse)
    return reverseOfCopies(first, second);
  if (needsReaching(first, second))
    return containsAll(first.region, *reaching) ? std::optional<Ops>(Ops{}) : std::nullopt;
  return std::nullopt;
}

std::optional<Ops> rewritePair(const Op &first, const Op &second, const Regions *reaching) {
  if (first.type == second.type)
    return single(mergeOps(first, second));
  if (auto normal = normalisePair(first, second, reaching))
    return normal;
  if (static_cast<int>(second.type) < static_cast<int>(first.type))
    return swapPair(first, second);
  return std::nullopt;
}

// ----- the driver ----------------------------------------------------------------------
struct Rewrite {
  std::size_t start, stop;
  Ops replacement;
};

std::string describe(const Shape &shape) {
  std::ostringstream out;
  out << "(";
  for (std::size_t i = 0; i < shape.size(); ++i)
    out << (i ? "," : "") << shape[i];
  out << ")";
  return out.str();
}

std::string describe(const Op &op) {
  return std::string(opTypeName(op.type)) + describe(op.in) + "->" + describe(op.out);
}

std::string describe(const Ops &ops) {
  std::string out;
  for (const Op &op : ops)
    out += (out.empty() ? "" : ", ") + describe(op);
  return "[" + out + "]";
}

// The rewrite state keeps what earlier scans proved, so that a scan only re-checks what a
// rewrite can have changed: `simplest[i]` marks ops that simplify no further, and the first
// `cleanPairs` neighbour pairs (whose ops and prefix are unchanged) rewrite to nothing.
// The rewrite found is still the leftmost one, as in the reference.
class Rewriter {
public:
  Rewriter(const Shape &in, Ops ops) : in_(in), ops_(std::move(ops)), simplest_(ops_.size(), 0) {}

  std::optional<Rewrite> first() {
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      if (simplest_[i])
        continue;
      if (auto simpler = simplifyOp(ops_[i]))
        return Rewrite{i, i + 1, std::move(*simpler)};
      simplest_[i] = 1;
    }
    for (std::size_t i = cleanPairs_; i + 1 < ops_.size(); ++i) {
      const Op &a = ops_[i], &b = ops_[i + 1];
      std::optional<Regions> reaching;
      if (needsReaching(a, b))
        reaching = reached(in_, ops_, i);
      if (auto replacement = rewritePair(a, b, reaching ? &*reaching : nullptr))
        return Rewrite{i, i + 2, std::move(*replacement)};
      cleanPairs_ = i + 1;
    }
    if (!ops_.empty() && reached(in_, ops_, ops_.size()).totalElms() == 0) {
      Ops fixed = emptyChain(in_, ops_.back().out);
      if (fixed != ops_)
        return Rewrite{0, ops_.size(), std::move(fixed)};
    }
    return std::nullopt;
  }

  void apply(Rewrite &step) {
    const auto begin = ops_.begin() + static_cast<std::ptrdiff_t>(step.start);
    const auto end = ops_.begin() + static_cast<std::ptrdiff_t>(step.stop);
    if (sameOps(begin, end, step.replacement))
      throw CanonicalizationError("a rewrite of " + describe(Ops(begin, end)) +
                                  " reported success but changed nothing");
    const std::size_t kept = std::min(step.stop - step.start, step.replacement.size());
    // Overwrite in place where the lengths overlap, then insert or erase the rest.
    std::move(step.replacement.begin(),
              step.replacement.begin() + static_cast<std::ptrdiff_t>(kept), begin);
    const auto tail = begin + static_cast<std::ptrdiff_t>(kept);
    const auto flagTail = simplest_.begin() + static_cast<std::ptrdiff_t>(step.start + kept);
    std::fill(simplest_.begin() + static_cast<std::ptrdiff_t>(step.start), flagTail, 0);
    if (step.replacement.size() > kept) {
      ops_.insert(tail, std::make_move_iterator(step.replacement.begin() +
                                                static_cast<std::ptrdiff_t>(kept)),
                  std::make_move_iterator(step.replacement.end()));
      simplest_.insert(flagTail, step.replacement.size() - kept, 0);
    } else {
      ops_.erase(tail, end);
      simplest_.erase(flagTail,
                      simplest_.begin() + static_cast<std::ptrdiff_t>(step.stop));
    }
    cleanPairs_ = std::min(cleanPairs_, step.start > 0 ? step.start - 1 : 0);
  }

  Ops take() { return std::move(ops_); }
  const Ops &ops() const { return ops_; }

private:
  const Shape &in_;
  Ops ops_;
  std::vector<char> simplest_;
  std::size_t cleanPairs_ = 0;
};

// ----- the memo ------------------------------------------------------------------------
void mix(std::size_t &seed, std::size_t value) {
  seed ^= value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

template <typename T> void mixAll(std::size_t &seed, const std::vector<T> &values) {
  mix(seed, values.size());
  for (const T &v : values)
    mix(seed, static_cast<std::size_t>(v));
}

// Consistent with Op::operator==: a region is hashed by its element set, so all empty
// regions of one shape (the shape is in the op's shapes) hash alike.
struct ChainHash {
  std::size_t operator()(const Chain &chain) const {
    std::size_t seed = 0;
    mixAll(seed, chain.inShape());
    for (const Op &op : chain.ops()) {
      mix(seed, static_cast<std::size_t>(op.type));
      mixAll(seed, op.out);
      mixAll(seed, op.axes);
      if ((op.type == OpType::SettSample || op.type == OpType::SettFillInto) &&
          !op.region.empty())
        for (const DimSet &d : op.region.dims())
          for (const auto &run : d.runs()) {
            mix(seed, static_cast<std::size_t>(run.first));
            mix(seed, static_cast<std::size_t>(run.second));
          }
    }
    return seed;
  }
};

// Bounded like the reference's cache: cleared when full (same chains recur across a
// model's repeated blocks, so a fresh start refills quickly).
constexpr std::size_t kMemoCapacity = 1 << 16;

struct Memo {
  std::mutex mutex;
  std::unordered_map<Chain, Ops, ChainHash> entries;
};

Memo &memo() {
  static Memo instance;
  return instance;
}

} // namespace

std::optional<Ops> simplifyOp(const Op &op) {
  if (isNoop(op))
    return Ops{};
  if (op.type == OpType::Reverse) {
    // Forget axes of size 1 (a Reverse of only such axes is a no-op, handled above).
    if (std::all_of(op.axes.begin(), op.axes.end(), [&](int d) { return op.in[d] > 1; }))
      return std::nullopt;
    std::vector<int> wide;
    for (int d : op.axes)
      if (op.in[d] > 1)
        wide.push_back(d);
    return single(reverseOp(op.in, std::move(wide)));
  }
  if (op.type == OpType::DimShuffle) {
    // Moving only size-1 axes keeps the row-major order: a Reshape.
    int last = -1;
    for (int axis : op.axes) {
      if (op.in[axis] == 1)
        continue;
      if (axis < last)
        return std::nullopt;
      last = axis;
    }
    return single(shapeOp(OpType::Reshape, op.in, op.out));
  }
  return std::nullopt;
}

Op mergeOps(const Op &first, const Op &second) {
  switch (first.type) {
  case OpType::DimShuffle: {
    std::vector<int> composed;
    composed.reserve(second.axes.size());
    for (int i : second.axes)
      composed.push_back(first.axes[i]);
    return dimShuffleOp(first.in, composed);
  }
  case OpType::Reverse: {
    std::vector<int> either;
    std::set_symmetric_difference(first.axes.begin(), first.axes.end(), second.axes.begin(),
                                  second.axes.end(), std::back_inserter(either));
    return reverseOp(first.in, std::move(either));
  }
  case OpType::SettSample:
    return sampleOpAt(first.in, second.region.fillInto(first.region));
  case OpType::SettFillInto:
    return fillOpAt(first.in, first.region.fillInto(second.region));
  default:
    return shapeOp(first.type, first.in, second.out);
  }
}

std::vector<Op> emptyChain(const Shape &in, const Shape &out) {
  Ops ops;
  const std::size_t rank = std::max<std::size_t>(out.size(), 1);
  Shape current = in;
  if (current.size() != rank) {
    Shape flat(rank, 1);
    flat[0] = numel(current);
    ops.push_back(shapeOp(OpType::Reshape, current, flat));
    current = std::move(flat);
  }
  const Shape target = out.empty() ? Shape{1} : out;
  Sources sources;
  for (Index size : target)
    sources.emplace_back(static_cast<std::size_t>(size), kEmptySource);
  for (Op &op : fillSampleOps(current, sources))
    ops.push_back(std::move(op));
  if (out.empty())
    ops.push_back(shapeOp(OpType::Reshape, target, Shape{}));
  return ops;
}

Regions reached(const Shape &in, const std::vector<Op> &ops, std::size_t count) {
  Regions regions(in, {Region::full(in)});
  for (std::size_t i = 0; i < count; ++i)
    regions = applyOp(ops[i], regions);
  return regions;
}

std::vector<Op> canonicalOps(const Shape &in, std::vector<Op> ops,
                             std::optional<long> maxRewrites) {
  const long n = static_cast<long>(ops.size());
  const long limit = maxRewrites ? *maxRewrites : 64 + 8 * (n + 2) * (n + 2);
  Rewriter rewriter(in, std::move(ops));
  long rewrites = 0;
  while (auto step = rewriter.first()) {
    rewriter.apply(*step);
    if (++rewrites > limit)
      throw CanonicalizationError(
          "canonicalization of a chain from " + describe(in) +
          " did not reach a fixpoint within " + std::to_string(limit) +
          " rewrites; last form: " + describe(rewriter.ops()));
  }
  return rewriter.take();
}

void clearCanonicalMemo() {
  Memo &m = memo();
  std::lock_guard<std::mutex> lock(m.mutex);
  m.entries.clear();
}

Chain Chain::canonicalized() const {
  Memo &m = memo();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    const auto found = m.entries.find(*this);
    if (found != m.entries.end())
      return Chain(in_, found->second);
  }
  Ops ops = canonicalOps(in_, ops_);
  std::lock_guard<std::mutex> lock(m.mutex);
  if (m.entries.size() >= kMemoCapacity)
    m.entries.clear();
  m.entries.emplace(*this, ops);
  return Chain(in_, std::move(ops));
}

} // namespace popart_unwind::core
