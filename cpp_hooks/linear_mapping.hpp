// Linear tile mapping of a flattened tensor, in Poplar's format.
#pragma once

#include <cstddef>

#include "tile_mapping.hpp"

namespace popart_unwind {

// Spread `numElements` elements over `numTiles` tiles from low to high tile index, in grains
// of `grainSize` elements, giving each used tile at least `minElementsPerTile` elements where
// the tensor is large enough (the rule of Poplibs' poputil::calcLinearTileMapping).
TileMapping linearTileMapping(std::size_t numElements, std::size_t numTiles,
                              std::size_t grainSize, std::size_t minElementsPerTile);

// The same mapping with its tiles rotated: what linearTileMapping puts on tile t goes to tile
// (t + startTile) % numTiles (PopART's linear mapper, which starts each tensor where the
// previous one ended).
TileMapping rotatedLinearTileMapping(std::size_t numElements, std::size_t numTiles,
                                     std::size_t grainSize, std::size_t minElementsPerTile,
                                     std::size_t startTile);

} // namespace popart_unwind
