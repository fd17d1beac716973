// Layout of a table sliced along its first axis (an embedding table).
#pragma once

#include <cstddef>

#include "tile_params.hpp"

namespace popart_unwind {

// How a row-major [numRows, numCols] table sliced along axis 0 (one row per lookup) is cut,
// after Poplibs' popops::createSliceableTensor: the unsliced axis is cut into column ranges of
// ceil(numCols / numTiles) columns rounded up to a multiple of the grain (the last range may
// be shorter), each holding those columns of every row, so a lookup reads from every used tile
// and no tile holds a whole row. When column ranges leave tiles idle, the rows are also cut
// into min(numRows, numTiles / colParts) nearly equal parts. Part (r, c) is on tile
// r * colParts + c.
struct SliceableLayout {
  std::size_t numRows = 0;
  std::size_t numCols = 0;
  std::size_t colsPerPart = 0;
  std::size_t colParts = 0; // 0 for an empty table
  std::size_t rowParts = 0;

  std::size_t tilesUsed() const { return colParts * rowParts; }
  std::size_t rowBegin(std::size_t tile) const {
    return partBegin(numRows, rowParts, tile / colParts);
  }
  std::size_t rowEnd(std::size_t tile) const {
    return partBegin(numRows, rowParts, tile / colParts + 1);
  }
  std::size_t colBegin(std::size_t tile) const { return (tile % colParts) * colsPerPart; }
  std::size_t colEnd(std::size_t tile) const {
    return colBegin(tile) + colsPerPart < numCols ? colBegin(tile) + colsPerPart : numCols;
  }
};

// The layout of `numRows` x `numCols` on params.numTiles tiles, in grains of
// params.grainElements columns.
SliceableLayout sliceableLayout(std::size_t numRows, std::size_t numCols,
                                const TileParams &params);

// out[e] = the tile of element e (row-major); the layout covers every element once by
// construction.
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
