// Linear tile mapping of a flattened tensor (Poplibs' poputil::calcLinearTileMapping rule).
#pragma once

#include <algorithm>
#include <cstddef>

#include "tile_params.hpp"

namespace popart_unwind {

// How `numElements` elements are spread from low to high tile index, in grains of
// `grainElements`, each used tile getting at least `minElementsPerTile` elements where the
// tensor is large enough: partition p holds grains [p * grains / parts, (p + 1) * grains /
// parts), on tile p.
struct LinearLayout {
  std::size_t numElements = 0;
  std::size_t grainElements = 1;
  std::size_t numGrains = 0;
  std::size_t numPartitions = 0; // the tiles used

  std::size_t begin(std::size_t part) const {
    return partBegin(numGrains, numPartitions, part) * grainElements;
  }
  std::size_t end(std::size_t part) const {
    return std::min(partBegin(numGrains, numPartitions, part + 1) * grainElements,
                    numElements);
  }
};

LinearLayout linearLayout(std::size_t numElements, const TileParams &params);

// out[e] = the tile of element e, the layout rotated so that what would lie on tile t lies on
// tile (t + startTile) % numTiles (PopART's linear mapper starts each tensor where the
// previous one ended). Returns the number of tiles used.
template <typename TileId>
std::size_t fillLinearTiles(const LinearLayout &layout, const TileParams &params,
                            std::size_t startTile, TileId *out) {
  for (std::size_t part = 0; part < layout.numPartitions; ++part) {
    const auto tile = static_cast<TileId>((part + startTile) % params.numTiles);
    std::fill(out + layout.begin(part), out + layout.end(part), tile);
  }
  return layout.numPartitions;
}

} // namespace popart_unwind
