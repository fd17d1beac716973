// Layouts as per-element tile arrays, and Poplar's format built from such an array.
//
// The planner and the cost model compare layouts element by element, so they want each hook's
// answer as a flat array of tile ids. Going through Poplar's format in Python costs one tuple
// per interval (millions for a real embedding table); these fill the array in C++ instead.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "sliceable_mapping.hpp"
#include "tile_mapping.hpp"

namespace popart_unwind {

// out[e] = the tile holding element e, for every interval of `mapping`. Throws
// std::invalid_argument (naming `what`) unless every element of [0, numElements) lies in
// exactly one interval (checked on the intervals, so each element is written once).
template <typename TileId>
void fillTiles(const TileMapping &mapping, TileId *out, std::size_t numElements,
               const std::string &what) {
  checkTileMapping(mapping, numElements, what);
  for (std::size_t tile = 0; tile < mapping.size(); ++tile) {
    for (const auto &[begin, end] : mapping[tile]) {
      std::fill(out + begin, out + end, static_cast<TileId>(tile));
    }
  }
}

// out[e] for a sliceable table (row-major [numRows, numCols]) laid out as `layout`; the
// layout covers every element once by construction.
template <typename TileId>
void fillSliceableTiles(const SliceableLayout &layout, TileId *out) {
  for (std::size_t tile = 0; tile < layout.tilesUsed(); ++tile) {
    const std::size_t colBegin = layout.colBegin(tile);
    const std::size_t colEnd = layout.colEnd(tile);
    for (std::size_t row = layout.rowBegin(tile); row < layout.rowEnd(tile); ++row) {
      TileId *base = out + row * layout.numCols;
      for (std::size_t col = colBegin; col < colEnd; ++col) {
        base[col] = static_cast<TileId>(tile);
      }
    }
  }
}

} // namespace popart_unwind
