// Regions of a tensor: products of one DimSet per dimension, and disjoint unions of them.
//
// The C++ counterpart of popart_unwind.memory.Region / DisjointRegions with the same
// semantics and the same decomposition into pieces (same pieces, same order), so that the
// solver built on it plants the same paths as the Python reference. A Region keeps each
// dimension's set even when another is empty (the per-dimension counts are the shape of a
// sample, as in numpy), plus an explicit empty flag; a dimension of size 0 is empty.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "unwind_core/dim_set.hpp"

namespace popart_unwind::core {

using Shape = std::vector<Index>;
using Dims = std::vector<DimSet>;

Index numel(const Shape &shape);

class Region {
public:
  Region() = default;
  Region(Shape shape, Dims dims, bool empty = false);
  static Region full(const Shape &shape);
  static Region box(const Shape &shape, const Shape &lower, const Shape &upper);

  const Shape &shape() const { return shape_; }
  const Dims &dims() const { return dims_; }
  bool empty() const { return empty_; }
  bool isFull() const;
  std::vector<Index> nelms() const;
  Index totalElms() const;

  Region sample(const Region &where) const;
  Region fillInto(const Region &scaffold) const;
  Region dimShuffle(const std::vector<int> &perm) const;
  Region reverse(const std::vector<int> &axes) const;
  Region resized(const Shape &shape) const; // expand or reduce: resized dims full if on
  bool sameSet(const Region &other) const;

private:
  Shape shape_;
  Dims dims_;
  bool empty_ = true;
};

// Pairwise-disjoint non-empty Regions of one shape.
class Regions {
public:
  Regions() = default;
  explicit Regions(Shape shape) : shape_(std::move(shape)) {}
  Regions(Shape shape, const std::vector<Region> &members);
  static Regions of(const Region &region) { return Regions(region.shape(), {region}); }

  const Shape &shape() const { return shape_; }
  const std::vector<Region> &members() const { return members_; }
  Index totalElms() const;
  bool empty() const { return members_.empty(); }
  void add(const Region &region); // dropped when empty
  void addAll(const Regions &regions);

  Regions intersect(const Regions &other) const;
  Regions subtract(const Regions &other) const;
  Regions sample(const Region &where) const;
  Regions fillInto(const Region &scaffold) const;
  Regions reshape(const Shape &shape) const;
  Regions dimShuffle(const std::vector<int> &perm) const;
  Regions reverse(const std::vector<int> &axes) const;
  Regions expand(const Shape &shape) const;
  Regions reduce(const Shape &shape) const;

private:
  Shape shape_;
  std::vector<Region> members_;
};

// Products: intersection (nullopt when empty) and `a \ b` as disjoint pieces, piece d
// agreeing with b before dimension d, outside b on d and free after it.
std::optional<Dims> intersectDims(const Dims &a, const Dims &b);
std::vector<Dims> subtractDims(const Dims &a, const Dims &b);
// `a` minus every member of `others`, in order.
Regions subtractAll(const Region &a, const std::vector<Region> &others);
// Disjoint products in `out` covering the non-empty region `dims` of `in`, flat order kept.
std::vector<Dims> reshapeDims(const Shape &in, const Dims &dims, const Shape &out);

} // namespace popart_unwind::core
