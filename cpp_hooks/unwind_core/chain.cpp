#include "unwind_core/chain.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace popart_unwind::core {

namespace {
const char *const kNames[] = {"DimShuffle", "Expand",       "Reduce",    "Reshape",
                              "Reverse",    "SettFillInto", "SettSample"};
} // namespace

const char *opTypeName(OpType type) { return kNames[static_cast<int>(type)]; }

OpType opTypeFromName(const std::string &name) {
  for (int i = 0; i < 7; ++i)
    if (name == kNames[i])
      return static_cast<OpType>(i);
  throw std::invalid_argument("unknown chain op type " + name);
}

bool Op::operator==(const Op &other) const {
  if (type != other.type || in != other.in || out != other.out || axes != other.axes)
    return false;
  if (type == OpType::SettSample || type == OpType::SettFillInto)
    return region.sameSet(other.region);
  return true;
}

Op dimShuffleOp(const Shape &in, const std::vector<int> &perm) {
  Shape out;
  for (int axis : perm)
    out.push_back(in[axis]);
  return Op{OpType::DimShuffle, in, out, perm, Region()};
}

Op reverseOp(const Shape &in, std::vector<int> axes) {
  // An axis reversed twice is given back: keep the axes named an odd number of times.
  std::sort(axes.begin(), axes.end());
  std::vector<int> odd;
  for (std::size_t i = 0; i < axes.size();) {
    std::size_t j = i;
    while (j < axes.size() && axes[j] == axes[i])
      ++j;
    if ((j - i) % 2 == 1)
      odd.push_back(axes[i]);
    i = j;
  }
  return Op{OpType::Reverse, in, in, std::move(odd), Region()};
}

Op shapeOp(OpType type, const Shape &in, const Shape &out) {
  return Op{type, in, out, {}, Region()};
}

Op sampleOp(const Region &where) {
  return Op{OpType::SettSample, where.shape(), where.nelms(), {}, where};
}

Op fillOp(const Region &scaffold) {
  return Op{OpType::SettFillInto, scaffold.nelms(), scaffold.shape(), {}, scaffold};
}

Regions applyOp(const Op &op, const Regions &regions) {
  switch (op.type) {
  case OpType::DimShuffle:
    return regions.dimShuffle(op.axes);
  case OpType::Expand:
    return regions.expand(op.out);
  case OpType::Reduce:
    return regions.reduce(op.out);
  case OpType::Reshape:
    return regions.reshape(op.out);
  case OpType::Reverse:
    return regions.reverse(op.axes);
  case OpType::SettFillInto:
    return regions.fillInto(op.region);
  case OpType::SettSample:
    return regions.sample(op.region);
  }
  throw std::logic_error("applyOp: unknown op type");
}

Op inverseOp(const Op &op) {
  switch (op.type) {
  case OpType::DimShuffle: {
    std::vector<int> inverse(op.axes.size());
    for (std::size_t position = 0; position < op.axes.size(); ++position)
      inverse[op.axes[position]] = static_cast<int>(position);
    return dimShuffleOp(op.out, inverse);
  }
  case OpType::Expand:
    return shapeOp(OpType::Reduce, op.out, op.in);
  case OpType::Reduce:
    return shapeOp(OpType::Expand, op.out, op.in);
  case OpType::Reshape:
    return shapeOp(OpType::Reshape, op.out, op.in);
  case OpType::Reverse:
    return op;
  case OpType::SettFillInto:
    return sampleOp(op.region);
  case OpType::SettSample:
    return fillOp(op.region);
  }
  throw std::logic_error("inverseOp: unknown op type");
}

bool isNoop(const Op &op) {
  switch (op.type) {
  case OpType::DimShuffle:
    for (std::size_t i = 0; i < op.axes.size(); ++i)
      if (op.axes[i] != static_cast<int>(i))
        return false;
    return true;
  case OpType::Reverse:
    for (int axis : op.axes)
      if (op.in[axis] > 1)
        return false;
    return true;
  default:
    return op.in == op.out;
  }
}

std::vector<int> resizedAxes(const Op &op) {
  std::vector<int> axes;
  for (std::size_t a = 0; a < op.in.size(); ++a)
    if (op.in[a] != op.out[a])
      axes.push_back(static_cast<int>(a));
  return axes;
}

Chain Chain::then(const Chain &other) const {
  if (other.in_ != outShape())
    throw std::invalid_argument("Chain::then: shapes do not meet");
  std::vector<Op> ops(ops_);
  ops.insert(ops.end(), other.ops_.begin(), other.ops_.end());
  return Chain(in_, std::move(ops));
}

Chain &Chain::append(Op op) {
  ops_.push_back(std::move(op));
  return *this;
}

Chain &Chain::mask(const Region &region) {
  append(sampleOp(region));
  return append(fillOp(region));
}

Regions Chain::apply(const Regions &regions) const {
  Regions current = regions;
  for (const Op &op : ops_)
    current = applyOp(op, current);
  return current;
}

Chain unwindChain(const Chain &chain) {
  Chain back(chain.outShape());
  for (auto it = chain.ops().rbegin(); it != chain.ops().rend(); ++it) {
    if (it->type == OpType::Expand) {
      Shape upper(it->out);
      for (int axis : resizedAxes(*it))
        upper[axis] = 1;
      back.append(sampleOp(Region::box(it->out, Shape(it->out.size(), 0), upper)));
    } else {
      back.append(inverseOp(*it));
    }
  }
  return back;
}

} // namespace popart_unwind::core
