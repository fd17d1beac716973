// Which input's layout an elementwise op's output copies.
#pragma once

#include <cstddef>
#include <vector>

#include "tile_mapping.hpp"

namespace popart_unwind {

// Index of the input mapping an elementwise output should be cloned from, by the preference
// order of Poplibs' popops::createOutputForElementWiseOp: the smallest maximum number of
// elements on one tile, then the most tiles occupied, then the fewest contiguous regions
// (touching intervals on a tile count as one), then the lowest index. Every mapping must
// cover `numElements` elements exactly once.
std::size_t chooseElementwiseOutput(const std::vector<TileMapping> &inputs,
                                    std::size_t numElements);

} // namespace popart_unwind
