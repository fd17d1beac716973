#include "unwind_core/dim_set.hpp"

#include <algorithm>

namespace popart_unwind::core {

void DimSet::push(Index lo, Index hi) {
  if (lo >= hi)
    return;
  if (!runs_.empty() && runs_.back().second == lo)
    runs_.back().second = hi;
  else
    runs_.emplace_back(lo, hi);
}

DimSet DimSet::full(Index size) { return interval(0, size); }

DimSet DimSet::interval(Index lo, Index hi) {
  DimSet out;
  out.push(lo, hi);
  return out;
}

DimSet DimSet::fromSorted(const std::vector<Index> &indices) {
  DimSet out;
  for (Index i : indices)
    out.push(i, i + 1);
  return out;
}

DimSet DimSet::fromRuns(std::vector<Run> runs) {
  DimSet out;
  for (const Run &r : runs)
    out.push(r.first, r.second);
  return out;
}

Index DimSet::count() const {
  Index total = 0;
  for (const Run &r : runs_)
    total += r.second - r.first;
  return total;
}

std::vector<Index> DimSet::ons() const {
  std::vector<Index> out;
  out.reserve(static_cast<std::size_t>(count()));
  for (const Run &r : runs_)
    for (Index i = r.first; i < r.second; ++i)
      out.push_back(i);
  return out;
}

DimSet DimSet::intersect(const DimSet &other) const {
  DimSet out;
  std::size_t i = 0, j = 0;
  const auto &a = runs_, &b = other.runs_;
  while (i < a.size() && j < b.size()) {
    out.push(std::max(a[i].first, b[j].first), std::min(a[i].second, b[j].second));
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return out;
}

DimSet DimSet::subtract(const DimSet &other) const {
  DimSet out;
  std::size_t j = 0;
  const auto &b = other.runs_;
  for (const Run &r : runs_) {
    Index lo = r.first;
    while (j < b.size() && b[j].second <= lo)
      ++j;
    std::size_t k = j;
    while (k < b.size() && b[k].first < r.second) {
      out.push(lo, b[k].first);
      lo = std::max(lo, b[k].second);
      ++k;
    }
    out.push(lo, r.second);
  }
  return out;
}

bool DimSet::contains(const DimSet &other) const { return other.subtract(*this).empty(); }

DimSet DimSet::reverse(Index size) const {
  DimSet out;
  for (auto it = runs_.rbegin(); it != runs_.rend(); ++it)
    out.push(size - it->second, size - it->first);
  return out;
}

DimSet DimSet::sample(const DimSet &where) const {
  DimSet out;
  Index rank = 0; // rank in `where` of the current run's first index
  std::size_t i = 0;
  for (const Run &w : where.runs_) {
    while (i < runs_.size() && runs_[i].second <= w.first)
      ++i;
    for (std::size_t k = i; k < runs_.size() && runs_[k].first < w.second; ++k) {
      const Index lo = std::max(runs_[k].first, w.first);
      const Index hi = std::min(runs_[k].second, w.second);
      out.push(rank + lo - w.first, rank + hi - w.first);
    }
    rank += w.second - w.first;
  }
  return out;
}

DimSet DimSet::fillInto(const DimSet &scaffold) const {
  DimSet out;
  Index rank = 0;
  std::size_t i = 0;
  for (const Run &s : scaffold.runs_) {
    const Index top = rank + (s.second - s.first); // ranks [rank, top) sit on this run
    while (i < runs_.size() && runs_[i].second <= rank)
      ++i;
    for (std::size_t k = i; k < runs_.size() && runs_[k].first < top; ++k) {
      const Index lo = std::max(runs_[k].first, rank);
      const Index hi = std::min(runs_[k].second, top);
      out.push(s.first + lo - rank, s.first + hi - rank);
    }
    rank = top;
  }
  return out;
}

} // namespace popart_unwind::core
