#include "linear_mapping.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace popart_unwind {

TileMapping linearTileMapping(std::size_t numElements, std::size_t numTiles,
                              std::size_t grainSize, std::size_t minElementsPerTile) {
  if (numTiles == 0) {
    throw std::invalid_argument("linear tile mapping needs at least one tile");
  }
  if (grainSize == 0) {
    throw std::invalid_argument("linear tile mapping needs a grain size of at least 1");
  }
  TileMapping mapping(numTiles);
  if (numElements == 0) {
    return mapping;
  }
  const std::size_t numGrains = ceilDiv(numElements, grainSize);
  std::size_t grainsPerTile = ceilDiv(numGrains, numTiles);
  if (minElementsPerTile > 0) {
    // Fewer, fuller tiles when each would otherwise hold less than the minimum.
    const std::size_t minGrainsPerTile = ceilDiv(minElementsPerTile, grainSize);
    const std::size_t maxUsefulTiles = std::max<std::size_t>(1, numGrains / minGrainsPerTile);
    grainsPerTile = std::max(grainsPerTile, ceilDiv(numGrains, maxUsefulTiles));
  }
  const std::size_t numPartitions = ceilDiv(numGrains, grainsPerTile);
  for (std::size_t tile = 0; tile < numPartitions; ++tile) {
    // Partition boundaries spread the grains as evenly as integer division allows.
    const std::size_t beginGrain = tile * numGrains / numPartitions;
    const std::size_t endGrain = (tile + 1) * numGrains / numPartitions;
    const std::size_t begin = beginGrain * grainSize;
    const std::size_t end = std::min(endGrain * grainSize, numElements);
    if (begin < end) {
      mapping[tile].emplace_back(begin, end);
    }
  }
  return mapping;
}

TileMapping rotatedLinearTileMapping(std::size_t numElements, std::size_t numTiles,
                                     std::size_t grainSize, std::size_t minElementsPerTile,
                                     std::size_t startTile) {
  if (numTiles != 0 && startTile >= numTiles) {
    throw std::invalid_argument("linear tile mapping: start tile " + std::to_string(startTile) +
                                " is not below the tile count " + std::to_string(numTiles));
  }
  TileMapping mapping = linearTileMapping(numElements, numTiles, grainSize, minElementsPerTile);
  std::rotate(mapping.begin(), mapping.end() - static_cast<std::ptrdiff_t>(startTile),
              mapping.end());
  return mapping;
}

} // namespace popart_unwind
