// Chains of view ops, the C++ counterpart of popart_unwind.memory.Chain.
//
// An Op is one of the seven view-op types, in the canonical order of OpType (the order
// the canonicalizer sorts neighbours into). Attributes: DimShuffle a permutation (numpy
// transpose: output axis i is input axis perm[i]); Reverse sorted axes; Reshape, Expand
// and Reduce their output shape; SettSample a Region of the input shape (the output is
// its elements, re-indexed); SettFillInto a Region of the output shape (the input lands
// on its elements, everything else is empty).
#pragma once

#include <string>
#include <vector>

#include "unwind_core/region.hpp"

namespace popart_unwind::core {

enum class OpType { DimShuffle, Expand, Reduce, Reshape, Reverse, SettFillInto, SettSample };

const char *opTypeName(OpType type);
OpType opTypeFromName(const std::string &name);

struct Op {
  OpType type;
  Shape in;
  Shape out;
  std::vector<int> axes; // DimShuffle: permutation; Reverse: sorted axes
  Region region;         // SettSample, SettFillInto

  // Ops compare by meaning: same type, shapes and attribute (regions by element set).
  bool operator==(const Op &other) const;
  bool operator!=(const Op &other) const { return !(*this == other); }
};

// Constructors that compute the output shape (attributes assumed valid).
Op dimShuffleOp(const Shape &in, const std::vector<int> &perm);
Op reverseOp(const Shape &in, std::vector<int> axes); // sorted; axes named twice cancel
Op shapeOp(OpType type, const Shape &in, const Shape &out); // Reshape, Expand, Reduce
Op sampleOp(const Region &where);                          // input shape: where.shape()
Op fillOp(const Region &scaffold);                         // input shape: scaffold.nelms()

Regions applyOp(const Op &op, const Regions &regions);
Op inverseOp(const Op &op);
bool isNoop(const Op &op);
// Axes a Reduce sums over / an Expand broadcasts (where the sizes differ).
std::vector<int> resizedAxes(const Op &op);

class Chain {
public:
  Chain() = default;
  explicit Chain(Shape in) : in_(std::move(in)) {}
  Chain(Shape in, std::vector<Op> ops) : in_(std::move(in)), ops_(std::move(ops)) {}

  const Shape &inShape() const { return in_; }
  const Shape &outShape() const { return ops_.empty() ? in_ : ops_.back().out; }
  const std::vector<Op> &ops() const { return ops_; }

  Chain then(const Chain &other) const;
  Chain &append(Op op);
  Chain &mask(const Region &region); // keep `region`'s elements in place, empty the rest
  Regions apply(const Regions &regions) const;
  Regions apply(const Region &region) const { return apply(Regions::of(region)); }
  // An equivalent chain in canonical form (canonical.cpp), memoised.
  Chain canonicalized() const;

  bool operator==(const Chain &other) const { return in_ == other.in_ && ops_ == other.ops_; }

private:
  Shape in_;
  std::vector<Op> ops_;
};

// The chain that takes a layout wanted at `chain`'s output back to its input: each op
// inverted, an Expand undone by sampling the lowest index of each broadcast axis.
Chain unwindChain(const Chain &chain);

} // namespace popart_unwind::core
