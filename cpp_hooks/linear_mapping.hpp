// Linear tile mapping of a flattened tensor, in Poplar's format.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace popart_unwind {

// A half-open interval [begin, end) of row-major flat element indices.
using Interval = std::pair<std::size_t, std::size_t>;

// For each tile, the intervals of elements it holds (Poplar's Graph::TileToTensorMapping).
using TileMapping = std::vector<std::vector<Interval>>;

// Spread `numElements` elements over `numTiles` tiles from low to high tile index, in grains
// of `grainSize` elements, giving each used tile at least `minElementsPerTile` elements where
// the tensor is large enough (the rule of Poplibs' poputil::calcLinearTileMapping).
TileMapping linearTileMapping(std::size_t numElements, std::size_t numTiles,
                              std::size_t grainSize, std::size_t minElementsPerTile);

} // namespace popart_unwind
