// Tile mappings in Poplar's format, and the small helpers every hook shares.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace popart_unwind {

// A half-open interval [begin, end) of row-major flat element indices.
using Interval = std::pair<std::size_t, std::size_t>;

// For each tile, the intervals of elements it holds (Poplar's Graph::TileToTensorMapping).
using TileMapping = std::vector<std::vector<Interval>>;

inline std::size_t ceilDiv(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// Start of part `part` when `size` items are cut into `parts` nearly equal contiguous parts
// (sizes differ by at most one; part `parts` starts at `size`).
inline std::size_t partBegin(std::size_t size, std::size_t parts, std::size_t part) {
  return part * size / parts;
}

// Append [begin, end) to a tile's intervals, extending the last interval when the two touch,
// so that a tile's contiguous elements form one region as Poplar would report them.
inline void appendInterval(std::vector<Interval> &intervals, std::size_t begin,
                           std::size_t end) {
  if (begin >= end) {
    return;
  }
  if (!intervals.empty() && intervals.back().second == begin) {
    intervals.back().second = end;
  } else {
    intervals.emplace_back(begin, end);
  }
}

// Throw std::invalid_argument (naming `what`) unless every element of [0, numElements) lies in
// exactly one interval of `mapping` and no interval is reversed or out of range.
void checkTileMapping(const TileMapping &mapping, std::size_t numElements,
                      const std::string &what);

// Number of elements held by each tile.
std::vector<std::size_t> elementsPerTile(const TileMapping &mapping);

} // namespace popart_unwind
