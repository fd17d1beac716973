#include "sliceable_mapping.hpp"

#include <algorithm>

namespace popart_unwind {

SliceableLayout sliceableLayout(std::size_t numRows, std::size_t numCols,
                                const TileParams &params) {
  params.check();
  SliceableLayout layout;
  layout.numRows = numRows;
  layout.numCols = numCols;
  if (numRows == 0 || numCols == 0) {
    return layout;
  }
  const std::size_t grain = params.grainElements;
  layout.colsPerPart = ceilDiv(ceilDiv(numCols, params.numTiles), grain) * grain;
  layout.colParts = ceilDiv(numCols, layout.colsPerPart);
  layout.rowParts = std::max<std::size_t>(1, std::min(numRows, params.numTiles / layout.colParts));
  return layout;
}

} // namespace popart_unwind
