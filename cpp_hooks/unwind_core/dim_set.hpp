// A set of indices of one tensor dimension, as sorted disjoint half-open runs.
//
// The C++ counterpart of one dimension of popart_unwind.memory.Region (which keeps the
// compressed Sett form of the same set). Runs are the natural exact form here: every
// operation the unwinding solver needs (intersect, subtract, reverse, sample, fill) is a
// linear merge over runs, and the common sets (full, boxes, slices) are a single run.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace popart_unwind::core {

using Index = std::int64_t;

class DimSet {
public:
  using Run = std::pair<Index, Index>; // [first, second)

  DimSet() = default;
  static DimSet full(Index size);
  static DimSet interval(Index lo, Index hi);
  // From strictly increasing indices.
  static DimSet fromSorted(const std::vector<Index> &indices);
  // Runs must be sorted, disjoint and non-empty; adjacent runs are merged.
  static DimSet fromRuns(std::vector<Run> runs);

  const std::vector<Run> &runs() const { return runs_; }
  bool empty() const { return runs_.empty(); }
  Index count() const;
  bool isFull(Index size) const {
    return size == 0 ? runs_.empty()
                     : (runs_.size() == 1 && runs_[0].first == 0 && runs_[0].second == size);
  }
  std::vector<Index> ons() const;

  DimSet intersect(const DimSet &other) const;
  DimSet subtract(const DimSet &other) const;
  bool contains(const DimSet &other) const;
  // Image under x -> size - 1 - x.
  DimSet reverse(Index size) const;
  // Elements inside `where`, renumbered by their rank in `where`.
  DimSet sample(const DimSet &where) const;
  // Inverse of sample: rank j goes to the j-th index of `scaffold`.
  DimSet fillInto(const DimSet &scaffold) const;

  bool operator==(const DimSet &other) const { return runs_ == other.runs_; }
  bool operator!=(const DimSet &other) const { return runs_ != other.runs_; }
  bool operator<(const DimSet &other) const { return runs_ < other.runs_; }

private:
  std::vector<Run> runs_;
  void push(Index lo, Index hi); // append a run after every existing one, merging
};

} // namespace popart_unwind::core
