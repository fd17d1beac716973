#include "sliceable_mapping.hpp"

#include <algorithm>
#include <stdexcept>

namespace popart_unwind {

SliceableLayout sliceableLayout(std::size_t numRows, std::size_t numCols, std::size_t numTiles,
                                std::size_t grainSize) {
  if (numTiles == 0) {
    throw std::invalid_argument("sliceable table mapping needs at least one tile");
  }
  if (grainSize == 0) {
    throw std::invalid_argument("sliceable table mapping needs a grain size of at least 1");
  }
  SliceableLayout layout;
  layout.numRows = numRows;
  layout.numCols = numCols;
  if (numRows == 0 || numCols == 0) {
    return layout;
  }
  layout.colsPerPart = ceilDiv(ceilDiv(numCols, numTiles), grainSize) * grainSize;
  layout.colParts = ceilDiv(numCols, layout.colsPerPart);
  layout.rowParts = std::max<std::size_t>(1, std::min(numRows, numTiles / layout.colParts));
  return layout;
}

TileMapping sliceableTableMapping(std::size_t numRows, std::size_t numCols,
                                  std::size_t numTiles, std::size_t grainSize) {
  const SliceableLayout layout = sliceableLayout(numRows, numCols, numTiles, grainSize);
  TileMapping mapping(numTiles);
  for (std::size_t tile = 0; tile < layout.tilesUsed(); ++tile) {
    auto &intervals = mapping[tile];
    intervals.reserve(layout.numIntervals(tile));
    const std::size_t colBegin = layout.colBegin(tile);
    const std::size_t colEnd = layout.colEnd(tile);
    for (std::size_t row = layout.rowBegin(tile); row < layout.rowEnd(tile); ++row) {
      appendInterval(intervals, row * numCols + colBegin, row * numCols + colEnd);
    }
  }
  return mapping;
}

} // namespace popart_unwind
