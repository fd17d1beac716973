#include "linear_mapping.hpp"

namespace popart_unwind {

LinearLayout linearLayout(std::size_t numElements, const TileParams &params) {
  params.check();
  LinearLayout layout;
  layout.numElements = numElements;
  layout.grainElements = params.grainElements;
  if (numElements == 0) {
    return layout;
  }
  layout.numGrains = ceilDiv(numElements, params.grainElements);
  std::size_t grainsPerTile = ceilDiv(layout.numGrains, params.numTiles);
  if (params.minElementsPerTile > 0) {
    // Fewer, fuller tiles when each would otherwise hold less than the minimum.
    const std::size_t minGrainsPerTile = ceilDiv(params.minElementsPerTile, params.grainElements);
    const std::size_t maxUsefulTiles =
        std::max<std::size_t>(1, layout.numGrains / minGrainsPerTile);
    grainsPerTile = std::max(grainsPerTile, ceilDiv(layout.numGrains, maxUsefulTiles));
  }
  layout.numPartitions = ceilDiv(layout.numGrains, grainsPerTile);
  return layout;
}

} // namespace popart_unwind
