// The swap rules of the canonicalizer, one function per family (see the header).
#include "unwind_core/canonical_swaps.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "unwind_core/fill_sample.hpp"

namespace popart_unwind::core {

namespace {

using Ops = std::optional<std::vector<Op>>;

Ops pair(Op a, Op b) {
  std::vector<Op> ops;
  ops.reserve(2);
  ops.push_back(std::move(a));
  ops.push_back(std::move(b));
  return ops;
}

bool contains(const std::vector<int> &axes, int axis) {
  return std::find(axes.begin(), axes.end(), axis) != axes.end();
}

// `shape` with the listed axes set to `sizes` taken from the same axes of `source`.
Shape replaced(Shape shape, const std::vector<int> &axes, const Shape &source) {
  for (int a : axes)
    shape[a] = source[a];
  return shape;
}

Shape withOnes(Shape shape, const std::vector<int> &axes) {
  for (int a : axes)
    shape[a] = 1;
  return shape;
}

// The groups whose axes of size > 1 on one side are all touched; nullopt when a group is
// touched only in part.
std::optional<std::vector<const ReshapeGroup *>>
wholeGroups(const std::vector<ReshapeGroup> &groups, bool outputSide, const Shape &shape,
            const std::vector<int> &touched) {
  std::vector<const ReshapeGroup *> whole;
  for (const ReshapeGroup &group : groups) {
    std::size_t wide = 0, hit = 0;
    for (int a : outputSide ? group.outs : group.ins) {
      if (shape[a] <= 1)
        continue;
      ++wide;
      hit += contains(touched, a) ? 1 : 0;
    }
    if (hit > 0 && hit != wide)
      return std::nullopt;
    if (hit > 0)
      whole.push_back(&group);
  }
  return whole;
}

// ----- X -> DimShuffle -----------------------------------------------------------------
Ops shapeAttrThenDimShuffle(const Op &first, const Op &shuffle) {
  Op moved = dimShuffleOp(first.in, shuffle.axes);
  Shape out;
  for (int p : shuffle.axes)
    out.push_back(first.out[p]);
  Op again = shapeOp(first.type, moved.out, out);
  return pair(std::move(moved), std::move(again));
}

Ops reverseThenDimShuffle(const Op &reverse, const Op &shuffle) {
  Op moved = dimShuffleOp(reverse.in, shuffle.axes);
  std::vector<int> dims;
  for (std::size_t i = 0; i < shuffle.axes.size(); ++i)
    if (contains(reverse.axes, shuffle.axes[i]))
      dims.push_back(static_cast<int>(i));
  Op again = reverseOp(moved.out, std::move(dims));
  return pair(std::move(moved), std::move(again));
}

Ops regionOpThenDimShuffle(const Op &first, const Op &shuffle) {
  Op moved = dimShuffleOp(first.in, shuffle.axes);
  Region region = first.region.dimShuffle(shuffle.axes);
  Op again = first.type == OpType::SettSample ? sampleOpAt(moved.out, std::move(region))
                                              : fillOpAt(moved.out, std::move(region));
  return pair(std::move(moved), std::move(again));
}

// Valid when the permutation keeps each group's output axes together and in order.
Ops reshapeThenDimShuffle(const Op &reshape, const Op &shuffle) {
  const auto groups = reshapeGroups(reshape.in, reshape.out);
  if (!groups)
    return std::nullopt;
  std::vector<int> position(shuffle.axes.size());
  for (std::size_t p = 0; p < shuffle.axes.size(); ++p)
    position[shuffle.axes[p]] = static_cast<int>(p);
  std::vector<std::pair<int, const std::vector<int> *>> placed;
  std::vector<int> dropped;
  for (const ReshapeGroup &group : *groups) {
    if (group.outs.empty()) {
      dropped.insert(dropped.end(), group.ins.begin(), group.ins.end());
      continue;
    }
    const int start = position[group.outs[0]];
    for (std::size_t k = 0; k < group.outs.size(); ++k)
      if (position[group.outs[k]] != start + static_cast<int>(k))
        return std::nullopt;
    placed.emplace_back(start, &group.ins);
  }
  std::sort(placed.begin(), placed.end(),
            [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<int> inPerm;
  for (const auto &entry : placed)
    inPerm.insert(inPerm.end(), entry.second->begin(), entry.second->end());
  inPerm.insert(inPerm.end(), dropped.begin(), dropped.end());
  Op moved = dimShuffleOp(reshape.in, inPerm);
  Op again = shapeOp(OpType::Reshape, moved.out, shuffle.out);
  return pair(std::move(moved), std::move(again));
}

// ----- X -> Expand ---------------------------------------------------------------------
// Commute when no axis is summed and then broadcast again.
Ops reduceThenExpand(const Op &reduce, const Op &expand) {
  const std::vector<int> grown = resizedAxes(expand);
  for (int a : resizedAxes(reduce))
    if (contains(grown, a))
      return std::nullopt;
  Op broadcast = shapeOp(OpType::Expand, reduce.in, replaced(reduce.in, grown, expand.out));
  Op again = shapeOp(OpType::Reduce, broadcast.out, expand.out);
  return pair(std::move(broadcast), std::move(again));
}

// Valid when every broadcast axis is a size-1 axis the reshape keeps one-to-one.
Ops reshapeThenExpand(const Op &reshape, const Op &expand) {
  const auto groups = reshapeGroups(reshape.in, reshape.out);
  if (!groups)
    return std::nullopt;
  std::vector<int> partner(reshape.out.size(), -1);
  for (const ReshapeGroup &group : *groups)
    if (group.ins.size() == 1 && group.outs.size() == 1)
      partner[group.outs[0]] = group.ins[0];
  Shape target = reshape.in;
  for (int a : resizedAxes(expand)) {
    if (partner[a] < 0 || reshape.in[partner[a]] != 1)
      return std::nullopt;
    target[partner[a]] = expand.out[a];
  }
  Op broadcast = shapeOp(OpType::Expand, reshape.in, target);
  Op again = shapeOp(OpType::Reshape, target, expand.out);
  return pair(std::move(broadcast), std::move(again));
}

// Reversing an axis that is then broadcast or summed changes nothing.
Ops reverseThenExpandOrReduce(const Op &reverse, const Op &second) {
  const std::vector<int> touched = resizedAxes(second);
  Op moved = shapeOp(second.type, reverse.in, second.out);
  std::vector<int> dims;
  for (int d : reverse.axes)
    if (!contains(touched, d))
      dims.push_back(d);
  Op again = reverseOp(moved.out, std::move(dims));
  return pair(std::move(moved), std::move(again));
}

Ops fillThenExpand(const Op &fill, const Op &expand) {
  const std::vector<int> grown = resizedAxes(expand);
  for (int a : grown)
    if (fill.in[a] != 1)
      return std::nullopt;
  Op broadcast = shapeOp(OpType::Expand, fill.in, replaced(fill.in, grown, expand.out));
  Op again = fillOpAt(broadcast.out, fill.region.resized(expand.out));
  return pair(std::move(broadcast), std::move(again));
}

Ops sampleThenExpand(const Op &sample, const Op &expand) {
  const std::vector<int> grown = resizedAxes(expand);
  for (int a : grown)
    if (sample.in[a] != 1)
      return std::nullopt;
  Shape target = replaced(sample.in, grown, expand.out);
  Op broadcast = shapeOp(OpType::Expand, sample.in, target);
  Op again = sampleOpAt(target, sample.region.resized(target));
  return pair(std::move(broadcast), std::move(again));
}

// ----- X -> Reduce ---------------------------------------------------------------------
// Valid when each reshape group is either left alone or summed over entirely.
Ops reshapeThenReduce(const Op &reshape, const Op &reduce) {
  const auto groups = reshapeGroups(reshape.in, reshape.out);
  if (!groups)
    return std::nullopt;
  const auto summed = wholeGroups(*groups, true, reshape.out, resizedAxes(reduce));
  if (!summed)
    return std::nullopt;
  Shape squeezed = reshape.in;
  for (const ReshapeGroup *group : *summed)
    for (int a : group->ins)
      squeezed[a] = 1;
  Op total = shapeOp(OpType::Reduce, reshape.in, squeezed);
  Op again = shapeOp(OpType::Reshape, total.out, reduce.out);
  return pair(std::move(total), std::move(again));
}

// Summing a filled axis sums the input along it (the rest is zeros).
Ops fillThenReduce(const Op &fill, const Op &reduce) {
  const std::vector<int> summed = resizedAxes(reduce);
  Op total = shapeOp(OpType::Reduce, fill.in, withOnes(fill.in, summed));
  Dims dims = fill.region.dims();
  for (int a : summed)
    dims[a] = DimSet::full(1);
  Op again = fillOpAt(total.out, Region(reduce.out, std::move(dims)));
  return pair(std::move(total), std::move(again));
}

// Valid when every summed axis is sampled in full.
Ops sampleThenReduce(const Op &sample, const Op &reduce) {
  const std::vector<int> summed = resizedAxes(reduce);
  for (int a : summed)
    if (sample.out[a] != sample.in[a])
      return std::nullopt;
  Op total = shapeOp(OpType::Reduce, sample.in, withOnes(sample.in, summed));
  Op again = sampleOpAt(total.out, sample.region.resized(total.out));
  return pair(std::move(total), std::move(again));
}

// ----- X -> Reshape --------------------------------------------------------------------
// Valid when each group is reversed along all of its axes or none of them.
Ops reverseThenReshape(const Op &reverse, const Op &reshape) {
  const auto groups = reshapeGroups(reshape.in, reshape.out);
  if (!groups)
    return std::nullopt;
  const auto flipped = wholeGroups(*groups, false, reshape.in, reverse.axes);
  if (!flipped)
    return std::nullopt;
  std::vector<int> outDims;
  for (const ReshapeGroup *group : *flipped)
    for (int o : group->outs)
      if (reshape.out[o] > 1)
        outDims.push_back(o);
  Op moved = shapeOp(OpType::Reshape, reverse.in, reshape.out);
  Op again = reverseOp(moved.out, std::move(outDims));
  return pair(std::move(moved), std::move(again));
}

// Valid when the filled region, viewed in the new shape, is still one product region.
Ops fillThenReshape(const Op &fill, const Op &reshape) {
  Regions viewed = Regions::of(fill.region).reshape(reshape.out);
  if (viewed.members().size() != 1)
    return std::nullopt;
  const Region &region = viewed.members()[0];
  Op moved = shapeOp(OpType::Reshape, fill.in, region.nelms());
  Op again = fillOpAt(moved.out, region);
  return pair(std::move(moved), std::move(again));
}

// Valid when the sampled region, viewed in the reshaped full tensor, is one product region
// whose per-axis counts are the final shape (no sampled axis mixes kept and dropped
// elements through a split or merge).
Ops sampleThenReshape(const Op &sample, const Op &reshape) {
  const auto groups = reshapeGroups(reshape.in, reshape.out);
  if (!groups)
    return std::nullopt;
  Shape fullShape(reshape.out.size(), 1);
  for (const ReshapeGroup &group : *groups) {
    Index fullSize = 1;
    for (int a : group.ins)
      fullSize *= sample.in[a];
    if (group.outs.empty()) {
      if (fullSize != 1)
        return std::nullopt;
      continue;
    }
    Index inner = 1;
    for (std::size_t k = 1; k < group.outs.size(); ++k)
      inner *= reshape.out[group.outs[k]];
    if (fullSize % inner != 0)
      return std::nullopt;
    fullShape[group.outs[0]] = fullSize / inner;
    for (std::size_t k = 1; k < group.outs.size(); ++k)
      fullShape[group.outs[k]] = reshape.out[group.outs[k]];
  }
  Regions viewed = Regions::of(sample.region).reshape(fullShape);
  if (viewed.members().size() != 1 || viewed.members()[0].nelms() != reshape.out)
    return std::nullopt;
  Op moved = shapeOp(OpType::Reshape, sample.in, fullShape);
  Op again = sampleOpAt(fullShape, viewed.members()[0]);
  return pair(std::move(moved), std::move(again));
}

// ----- X -> Reverse, Sample -> Fill ----------------------------------------------------
Ops regionOpThenReverse(const Op &first, const Op &reverse) {
  Op moved = reverseOp(first.in, reverse.axes);
  Region region = first.region.reverse(reverse.axes);
  Op again = first.type == OpType::SettSample ? sampleOpAt(moved.out, std::move(region))
                                              : fillOpAt(moved.out, std::move(region));
  return pair(std::move(moved), std::move(again));
}

// Always possible: route through a scaffold holding the input and the zeros.
Ops sampleThenFill(const Op &sample, const Op &fill) {
  return fillSampleOps(sample.in, sampleFillSources(sample.region, fill.region));
}

} // namespace

std::optional<std::vector<ReshapeGroup>> reshapeGroups(const Shape &in, const Shape &out) {
  if (numel(in) == 0)
    return std::nullopt;
  std::vector<ReshapeGroup> groups;
  const std::size_t ni = in.size(), no = out.size();
  std::size_t i = 0, j = 0;
  while (i < ni || j < no) {
    const bool inOne = i < ni && in[i] == 1;
    const bool outOne = j < no && out[j] == 1;
    if (inOne && outOne) {
      groups.push_back({{static_cast<int>(i++)}, {static_cast<int>(j++)}});
    } else if (inOne) {
      groups.push_back({{static_cast<int>(i++)}, {}});
    } else if (outOne) {
      groups.push_back({{}, {static_cast<int>(j++)}});
    } else {
      ReshapeGroup group{{static_cast<int>(i)}, {static_cast<int>(j)}};
      Index inSize = in[i++], outSize = out[j++];
      while (inSize != outSize) {
        if (inSize < outSize) {
          group.ins.push_back(static_cast<int>(i));
          inSize *= in[i++];
        } else {
          group.outs.push_back(static_cast<int>(j));
          outSize *= out[j++];
        }
      }
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

std::optional<std::vector<Op>> swapPair(const Op &first, const Op &second) {
  using T = OpType;
  const T a = first.type;
  switch (second.type) {
  case T::DimShuffle:
    if (a == T::Expand || a == T::Reduce)
      return shapeAttrThenDimShuffle(first, second);
    if (a == T::Reshape)
      return reshapeThenDimShuffle(first, second);
    if (a == T::Reverse)
      return reverseThenDimShuffle(first, second);
    return regionOpThenDimShuffle(first, second); // SettFillInto, SettSample
  case T::Expand:
    if (a == T::Reduce)
      return reduceThenExpand(first, second);
    if (a == T::Reshape)
      return reshapeThenExpand(first, second);
    if (a == T::Reverse)
      return reverseThenExpandOrReduce(first, second);
    if (a == T::SettFillInto)
      return fillThenExpand(first, second);
    return sampleThenExpand(first, second);
  case T::Reduce:
    if (a == T::Reshape)
      return reshapeThenReduce(first, second);
    if (a == T::Reverse)
      return reverseThenExpandOrReduce(first, second);
    if (a == T::SettFillInto)
      return fillThenReduce(first, second);
    return sampleThenReduce(first, second);
  case T::Reshape:
    if (a == T::Reverse)
      return reverseThenReshape(first, second);
    if (a == T::SettFillInto)
      return fillThenReshape(first, second);
    return sampleThenReshape(first, second);
  case T::Reverse:
    return regionOpThenReverse(first, second);
  case T::SettFillInto:
    return sampleThenFill(first, second);
  case T::SettSample:
    break;
  }
  throw std::logic_error("swapPair: the pair is already in canonical order");
}

} // namespace popart_unwind::core
