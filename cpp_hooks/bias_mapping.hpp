// Bias (broadcast operand) mapping that follows the tiles holding each output channel.
#pragma once

#include <cstddef>

#include "tile_mapping.hpp"

namespace popart_unwind {

// Map a bias of `numChannels` elements for an activation of `numElements` elements whose
// channels are its last (fastest-varying) axis, so that element c of the flat activation
// belongs to channel c % numChannels. Bias element c goes to the tile of `activation` holding
// the most elements of channel c (ties to the lowest tile). Runs in O(intervals + used tiles x
// channels). An activation with no elements gives a linear mapping of the bias.
TileMapping biasTileMapping(const TileMapping &activation, std::size_t numElements,
                            std::size_t numChannels);

} // namespace popart_unwind
