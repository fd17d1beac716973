#include "unwind_core/region.hpp"

#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

namespace popart_unwind::core {

Index numel(const Shape &shape) {
  Index total = 1;
  for (Index n : shape)
    total *= n;
  return total;
}

// -- Region ------------------------------------------------------------------------------
Region::Region(Shape shape, Dims dims, bool empty)
    : shape_(std::move(shape)), dims_(std::move(dims)), empty_(empty) {
  if (dims_.size() != shape_.size())
    throw std::invalid_argument("Region: one set per dimension is needed");
  for (std::size_t d = 0; d < shape_.size(); ++d) {
    if (shape_[d] == 0)
      dims_[d] = DimSet();
    empty_ = empty_ || dims_[d].empty();
  }
}

Region Region::full(const Shape &shape) {
  Dims dims;
  for (Index n : shape)
    dims.push_back(DimSet::full(n));
  return Region(shape, std::move(dims));
}

Region Region::box(const Shape &shape, const Shape &lower, const Shape &upper) {
  Dims dims;
  for (std::size_t d = 0; d < shape.size(); ++d)
    dims.push_back(DimSet::interval(lower[d], upper[d]));
  return Region(shape, std::move(dims));
}

bool Region::isFull() const {
  if (empty_)
    return false;
  for (std::size_t d = 0; d < shape_.size(); ++d)
    if (!dims_[d].isFull(shape_[d]))
      return false;
  return true;
}

std::vector<Index> Region::nelms() const {
  std::vector<Index> out;
  for (const DimSet &d : dims_)
    out.push_back(d.count());
  return out;
}

Index Region::totalElms() const { return empty_ ? 0 : numel(nelms()); }

Region Region::sample(const Region &where) const {
  Dims dims;
  for (std::size_t d = 0; d < dims_.size(); ++d)
    dims.push_back(dims_[d].sample(where.dims_[d]));
  return Region(where.nelms(), std::move(dims), empty_ || where.empty_);
}

Region Region::fillInto(const Region &scaffold) const {
  Dims dims;
  for (std::size_t d = 0; d < dims_.size(); ++d)
    dims.push_back(dims_[d].fillInto(scaffold.dims_[d]));
  return Region(scaffold.shape_, std::move(dims), empty_ || scaffold.empty_);
}

Region Region::dimShuffle(const std::vector<int> &perm) const {
  Shape shape;
  Dims dims;
  for (int axis : perm) {
    shape.push_back(shape_[axis]);
    dims.push_back(dims_[axis]);
  }
  return Region(std::move(shape), std::move(dims), empty_);
}

Region Region::reverse(const std::vector<int> &axes) const {
  Dims dims(dims_);
  for (int axis : axes)
    dims[axis] = dims[axis].reverse(shape_[axis]);
  return Region(shape_, std::move(dims), empty_);
}

Region Region::resized(const Shape &shape) const {
  Dims dims;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    if (shape_[d] == shape[d])
      dims.push_back(dims_[d]);
    else
      dims.push_back(dims_[d].empty() ? DimSet() : DimSet::full(shape[d]));
  }
  return Region(shape, std::move(dims), empty_);
}

bool Region::sameSet(const Region &other) const {
  if (shape_ != other.shape_)
    return false;
  if (empty_ || other.empty_)
    return empty_ && other.empty_;
  return dims_ == other.dims_;
}

// -- products ----------------------------------------------------------------------------
std::optional<Dims> intersectDims(const Dims &a, const Dims &b) {
  Dims out;
  out.reserve(a.size());
  for (std::size_t d = 0; d < a.size(); ++d) {
    out.push_back(a[d].intersect(b[d]));
    if (out.back().empty())
      return std::nullopt;
  }
  return out;
}

std::vector<Dims> subtractDims(const Dims &a, const Dims &b) {
  const auto inter = intersectDims(a, b);
  if (!inter)
    return {a};
  std::vector<Dims> pieces;
  for (std::size_t d = 0; d < a.size(); ++d) {
    DimSet rest = a[d].subtract(b[d]);
    if (rest.empty())
      continue;
    Dims piece(inter->begin(), inter->begin() + static_cast<std::ptrdiff_t>(d));
    piece.push_back(std::move(rest));
    piece.insert(piece.end(), a.begin() + static_cast<std::ptrdiff_t>(d) + 1, a.end());
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

Regions subtractAll(const Region &a, const std::vector<Region> &others) {
  std::vector<Dims> pieces;
  if (!a.empty())
    pieces.push_back(a.dims());
  for (const Region &b : others) {
    if (b.empty())
      continue;
    std::vector<Dims> next;
    for (const Dims &p : pieces)
      for (Dims &q : subtractDims(p, b.dims()))
        next.push_back(std::move(q));
    pieces = std::move(next);
  }
  Regions out(a.shape());
  for (Dims &p : pieces)
    out.add(Region(a.shape(), std::move(p)));
  return out;
}

// -- reshape -----------------------------------------------------------------------------
namespace {

struct Group {
  std::size_t inBegin, inEnd, outBegin, outEnd;
};

// Minimal contiguous (in, out) groups of equal product; no size is 0 or 1.
std::vector<Group> groups(const Shape &in, const Shape &out) {
  std::vector<Group> result;
  std::size_t i = 0, j = 0;
  while (i < in.size()) {
    const std::size_t i0 = i, j0 = j;
    Index pIn = in[i++], pOut = out[j++];
    while (pIn != pOut) {
      if (pIn < pOut)
        pIn *= in[i++];
      else
        pOut *= out[j++];
    }
    result.push_back({i0, i, j0, j});
  }
  return result;
}

std::vector<Index> flatten(const Shape &sizes, const Dims &dims) {
  std::vector<Index> flat{0};
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    const std::vector<Index> ons = dims[d].ons();
    std::vector<Index> next;
    next.reserve(flat.size() * ons.size());
    for (Index f : flat)
      for (Index o : ons)
        next.push_back(f * sizes[d] + o);
    flat = std::move(next);
  }
  return flat;
}

Dims fullDims(const Shape &sizes) {
  Dims dims;
  for (Index n : sizes)
    dims.push_back(DimSet::full(n));
  return dims;
}

std::vector<Dims> splitFlat(const std::vector<Index> &flat, const Shape &sizes) {
  if (flat.empty())
    return {};
  if (static_cast<Index>(flat.size()) == numel(sizes))
    return {fullDims(sizes)};
  if (sizes.size() == 1)
    return {Dims{DimSet::fromSorted(flat)}};
  const Shape tailSizes(sizes.begin() + 1, sizes.end());
  const Index inner = numel(tailSizes);
  // Classes of leading indices with the same trailing set, in order of first appearance.
  std::map<std::vector<Index>, std::size_t> classOf;
  std::vector<std::pair<std::vector<Index>, std::vector<Index>>> classes; // (tail, leads)
  std::size_t lo = 0;
  while (lo < flat.size()) {
    const Index lead = flat[lo] / inner;
    std::size_t hi = lo;
    std::vector<Index> tail;
    while (hi < flat.size() && flat[hi] / inner == lead)
      tail.push_back(flat[hi++] % inner);
    auto found = classOf.find(tail);
    if (found == classOf.end()) {
      classOf.emplace(tail, classes.size());
      classes.emplace_back(std::move(tail), std::vector<Index>{lead});
    } else {
      classes[found->second].second.push_back(lead);
    }
    lo = hi;
  }
  std::vector<Dims> pieces;
  for (const auto &[tail, leads] : classes) {
    const DimSet head = DimSet::fromSorted(leads);
    for (Dims &sub : splitFlat(tail, tailSizes)) {
      Dims piece{head};
      piece.insert(piece.end(), sub.begin(), sub.end());
      pieces.push_back(std::move(piece));
    }
  }
  return pieces;
}

// Reshaping one group flattens its product set: memoised, since the same patterns recur
// across a model's repeated blocks and their cost grows with the tensor's size. Bounded:
// cleared when full.
struct GroupMemo {
  std::mutex mutex;
  std::map<std::tuple<Shape, Dims, Shape>, std::vector<Dims>> entries;
};

constexpr std::size_t kGroupMemoEntries = 4096;

std::vector<Dims> groupPieces(const Shape &sizesIn, const Dims &dims, const Shape &sizesOut) {
  bool allFull = true;
  for (std::size_t d = 0; d < dims.size(); ++d)
    allFull = allFull && dims[d].isFull(sizesIn[d]);
  if (allFull)
    return {fullDims(sizesOut)};
  if (sizesIn.size() == 1 && sizesOut.size() == 1)
    return {dims};
  static GroupMemo memo;
  auto key = std::make_tuple(sizesIn, dims, sizesOut);
  {
    std::lock_guard<std::mutex> lock(memo.mutex);
    const auto found = memo.entries.find(key);
    if (found != memo.entries.end())
      return found->second;
  }
  std::vector<Dims> pieces = splitFlat(flatten(sizesIn, dims), sizesOut);
  std::lock_guard<std::mutex> lock(memo.mutex);
  if (memo.entries.size() >= kGroupMemoEntries)
    memo.entries.clear();
  memo.entries.emplace(std::move(key), pieces);
  return pieces;
}

} // namespace

std::vector<Dims> reshapeDims(const Shape &in, const Dims &dims, const Shape &out) {
  Shape sizesIn, sizesOut;
  Dims kept;
  for (std::size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1) {
      sizesIn.push_back(in[d]);
      kept.push_back(dims[d]);
    }
  std::vector<std::size_t> outPos;
  for (std::size_t d = 0; d < out.size(); ++d)
    if (out[d] != 1) {
      outPos.push_back(d);
      sizesOut.push_back(out[d]);
    }
  std::vector<std::vector<Dims>> perGroup;
  for (const Group &g : groups(sizesIn, sizesOut)) {
    const auto at = [](const auto &v, std::size_t b, std::size_t e) {
      return std::decay_t<decltype(v)>(v.begin() + static_cast<std::ptrdiff_t>(b),
                                        v.begin() + static_cast<std::ptrdiff_t>(e));
    };
    perGroup.push_back(groupPieces(at(sizesIn, g.inBegin, g.inEnd), at(kept, g.inBegin, g.inEnd),
                                   at(sizesOut, g.outBegin, g.outEnd)));
  }
  // The product over groups, the first group varying slowest.
  std::vector<Dims> result;
  std::vector<std::size_t> pick(perGroup.size(), 0);
  for (const auto &options : perGroup)
    if (options.empty())
      return result;
  while (true) {
    Dims piece = fullDims(out);
    std::size_t k = 0;
    for (std::size_t g = 0; g < perGroup.size(); ++g)
      for (const DimSet &d : perGroup[g][pick[g]])
        piece[outPos[k++]] = d;
    result.push_back(std::move(piece));
    std::size_t g = perGroup.size();
    while (g > 0) {
      --g;
      if (++pick[g] < perGroup[g].size())
        break;
      pick[g] = 0;
      if (g == 0)
        return result;
    }
    if (perGroup.empty())
      return result;
  }
}

// -- Regions -----------------------------------------------------------------------------
Regions::Regions(Shape shape, const std::vector<Region> &members) : shape_(std::move(shape)) {
  for (const Region &r : members)
    add(r);
}

void Regions::add(const Region &region) {
  if (!region.empty())
    members_.push_back(region);
}

void Regions::addAll(const Regions &regions) {
  for (const Region &r : regions.members_)
    members_.push_back(r);
}

Index Regions::totalElms() const {
  Index total = 0;
  for (const Region &r : members_)
    total += r.totalElms();
  return total;
}

Regions Regions::intersect(const Regions &other) const {
  Regions out(shape_);
  for (const Region &a : members_)
    for (const Region &b : other.members_)
      if (auto dims = intersectDims(a.dims(), b.dims()))
        out.add(Region(shape_, std::move(*dims)));
  return out;
}

Regions Regions::subtract(const Regions &other) const {
  Regions out(shape_);
  for (const Region &a : members_)
    out.addAll(subtractAll(a, other.members_));
  return out;
}

Regions Regions::sample(const Region &where) const {
  Regions out(where.nelms());
  for (const Region &r : members_)
    out.add(r.sample(where));
  return out;
}

Regions Regions::fillInto(const Region &scaffold) const {
  Regions out(scaffold.shape());
  for (const Region &r : members_)
    out.add(r.fillInto(scaffold));
  return out;
}

Regions Regions::reshape(const Shape &shape) const {
  Regions out(shape);
  for (const Region &r : members_)
    for (Dims &d : reshapeDims(shape_, r.dims(), shape))
      out.add(Region(shape, std::move(d)));
  return out;
}

Regions Regions::dimShuffle(const std::vector<int> &perm) const {
  Shape shape;
  for (int axis : perm)
    shape.push_back(shape_[axis]);
  Regions out(shape);
  for (const Region &r : members_)
    out.add(r.dimShuffle(perm));
  return out;
}

Regions Regions::reverse(const std::vector<int> &axes) const {
  Regions out(shape_);
  for (const Region &r : members_)
    out.add(r.reverse(axes));
  return out;
}

Regions Regions::expand(const Shape &shape) const {
  Regions out(shape);
  for (const Region &r : members_)
    out.add(r.resized(shape));
  return out;
}

Regions Regions::reduce(const Shape &shape) const {
  Regions acc(shape);
  for (const Region &r : members_) {
    const Region reduced = r.resized(shape);
    acc.addAll(subtractAll(reduced, acc.members_));
  }
  return acc;
}

} // namespace popart_unwind::core
