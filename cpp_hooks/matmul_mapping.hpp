// Matmul partition model and the operand/output mappings it implies, in Poplar's format.
//
// A grouped matmul [G, M, K] x [G, K, N] -> [G, M, N] is treated as Poplibs treats it: a 1x1
// convolution with G conv groups, batch M, K input channels and N output channels. The work is
// cut into gG x gM x gK x gN blocks, one per tile; tile (g, m, k, n) multiplies LHS block
// (g, m, k) by RHS block (g, k, n) into a partial of output block (g, m, n), and the gK partials
// of each output block are summed. See docs/ipu-model.md for the cost and what it approximates.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tile_mapping.hpp"

namespace popart_unwind {

// Sizes of a grouped matmul [G, M, K] x [G, K, N].
struct MatmulShape {
  std::size_t groups; // G
  std::size_t rows;   // M (the convolution's batch)
  std::size_t inner;  // K (input channels, the reduced axis)
  std::size_t cols;   // N (output channels)
};

// The machine figures the partition cost uses.
struct MatmulCosts {
  std::size_t bytesPerElement;        // operand element size
  std::size_t partialBytesPerElement; // size of a partial sum sent for the gK reduction
  std::size_t exchangeBytesPerCycle;  // bytes a tile receives per cycle
  std::size_t macsPerCycle;           // multiply-accumulates per tile per cycle
  std::size_t syncCycles;             // cost of one BSP sync before an exchange
};

// How many parts each axis is cut into (each at least 1, at most the axis size).
struct MatmulSplits {
  std::size_t groups;
  std::size_t rows;
  std::size_t inner;
  std::size_t cols;

  std::size_t tilesUsed() const { return groups * rows * inner * cols; }
};

// Estimated cycles of a partition: the busiest tile's multiply-accumulates, the exchange of
// the operand parts it does not hold, one sync, and, when the inner axis is split, the
// exchange of partial sums for the reduction plus another sync.
std::uint64_t matmulPartitionCycles(const MatmulShape &shape, const MatmulSplits &splits,
                                    const MatmulCosts &costs);

// The splits with the fewest estimated cycles among all with gG*gM*gK*gN <= numTiles; ties go
// to fewer tiles, then to the lexicographically smallest (gG, gM, gK, gN).
MatmulSplits planMatmul(const MatmulShape &shape, std::size_t numTiles,
                        const MatmulCosts &costs);

// Tile of the part (g, m, k, n): ((g * gM + m) * gN + n) * gK + k, so that the gK tiles that
// reduce one output block are neighbours.
inline std::size_t matmulTile(const MatmulSplits &s, std::size_t g, std::size_t m,
                              std::size_t k, std::size_t n) {
  return ((g * s.rows + m) * s.cols + n) * s.inner + k;
}

// LHS [G, M, K]: each block (g, m, k) is read by the gN tiles (g, m, k, *) and is spread over
// them in gN nearly equal contiguous chunks of its row-major order.
TileMapping matmulLhsMapping(const MatmulShape &shape, const MatmulSplits &splits,
                             std::size_t numTiles);

// RHS [G, K, N]: each block (g, k, n) is spread over the gM tiles (g, *, k, n) that read it.
TileMapping matmulRhsMapping(const MatmulShape &shape, const MatmulSplits &splits,
                             std::size_t numTiles);

// Output [G, M, N]: each block (g, m, n) is spread over the gK tiles (g, m, *, n) that reduce
// its partial sums.
TileMapping matmulOutputMapping(const MatmulShape &shape, const MatmulSplits &splits,
                                std::size_t numTiles);

} // namespace popart_unwind
