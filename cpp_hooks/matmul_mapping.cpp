#include "matmul_mapping.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

namespace popart_unwind {
namespace {

void checkShape(const MatmulShape &shape) {
  if (shape.groups == 0 || shape.rows == 0 || shape.inner == 0 || shape.cols == 0) {
    throw std::invalid_argument("matmul sizes G, M, K, N must all be at least 1");
  }
}

void checkSplits(const MatmulShape &shape, const MatmulSplits &s, std::size_t numTiles) {
  checkShape(shape);
  const std::array<std::pair<std::size_t, std::size_t>, 4> pairs = {
      {{s.groups, shape.groups}, {s.rows, shape.rows}, {s.inner, shape.inner},
       {s.cols, shape.cols}}};
  for (const auto &[split, size] : pairs) {
    if (split == 0 || split > size) {
      throw std::invalid_argument("matmul split " + std::to_string(split) +
                                  " is not between 1 and its axis size " +
                                  std::to_string(size));
    }
  }
  if (numTiles == 0 || s.tilesUsed() > numTiles) {
    throw std::invalid_argument("matmul partition uses " + std::to_string(s.tilesUsed()) +
                                " tiles but only " + std::to_string(numTiles) +
                                " are available");
  }
}

// Map a row-major [A, B, C] tensor cut into blocks by `splits`: the elements of each block,
// in the block's own row-major order, are cut into `spread` nearly equal contiguous chunks and
// chunk j of block (a, b, c) goes to tile tileOf(a, b, c, j).
template <typename TileOf>
TileMapping blockSpreadMapping(const std::array<std::size_t, 3> &dims,
                               const std::array<std::size_t, 3> &splits, std::size_t spread,
                               std::size_t numTiles, TileOf tileOf) {
  TileMapping mapping(numTiles);
  const auto [sizeA, sizeB, sizeC] = dims;
  for (std::size_t a = 0; a < splits[0]; ++a) {
    const std::size_t a0 = partBegin(sizeA, splits[0], a);
    const std::size_t na = partBegin(sizeA, splits[0], a + 1) - a0;
    for (std::size_t b = 0; b < splits[1]; ++b) {
      const std::size_t b0 = partBegin(sizeB, splits[1], b);
      const std::size_t nb = partBegin(sizeB, splits[1], b + 1) - b0;
      for (std::size_t c = 0; c < splits[2]; ++c) {
        const std::size_t c0 = partBegin(sizeC, splits[2], c);
        const std::size_t nc = partBegin(sizeC, splits[2], c + 1) - c0;
        const std::size_t blockSize = na * nb * nc;
        for (std::size_t j = 0; j < spread; ++j) {
          const std::size_t lo = partBegin(blockSize, spread, j);
          const std::size_t hi = partBegin(blockSize, spread, j + 1);
          if (lo == hi) {
            continue;
          }
          auto &intervals = mapping[tileOf(a, b, c, j)];
          // Walk the block rows (fixed a, b; a run of nc elements along C) the chunk touches.
          for (std::size_t row = lo / nc; row * nc < hi; ++row) {
            const std::size_t first = std::max(lo, row * nc) - row * nc;
            const std::size_t last = std::min(hi, (row + 1) * nc) - row * nc;
            const std::size_t ia = row / nb;
            const std::size_t ib = row % nb;
            const std::size_t base = ((a0 + ia) * sizeB + (b0 + ib)) * sizeC + c0;
            appendInterval(intervals, base + first, base + last);
          }
        }
      }
    }
  }
  return mapping;
}

} // namespace

std::uint64_t matmulPartitionCycles(const MatmulShape &shape, const MatmulSplits &splits,
                                    const MatmulCosts &costs) {
  checkShape(shape);
  if (costs.bytesPerElement == 0 || costs.partialBytesPerElement == 0 ||
      costs.exchangeBytesPerCycle == 0 || costs.macsPerCycle == 0) {
    throw std::invalid_argument("matmul costs: element sizes, exchange bytes per cycle and "
                                "MACs per cycle must be at least 1");
  }
  const std::uint64_t gB = ceilDiv(shape.groups, splits.groups);
  const std::uint64_t mB = ceilDiv(shape.rows, splits.rows);
  const std::uint64_t kB = ceilDiv(shape.inner, splits.inner);
  const std::uint64_t nB = ceilDiv(shape.cols, splits.cols);
  const std::uint64_t compute = ceilDiv(gB * mB * kB * nB, costs.macsPerCycle);
  // A tile already holds its own share of each operand block and receives the rest.
  const std::uint64_t lhsBlock = gB * mB * kB;
  const std::uint64_t rhsBlock = gB * kB * nB;
  const std::uint64_t received =
      (lhsBlock - lhsBlock / splits.cols) + (rhsBlock - rhsBlock / splits.rows);
  std::uint64_t cycles = compute +
                         ceilDiv(received * costs.bytesPerElement, costs.exchangeBytesPerCycle) +
                         costs.syncCycles;
  if (splits.inner > 1) {
    // Each of the gK tiles of an output block sums one share of it: it receives that share's
    // partials from the other gK - 1 tiles.
    const std::uint64_t share = ceilDiv(gB * mB * nB, splits.inner);
    const std::uint64_t partials = share * (splits.inner - 1);
    cycles += ceilDiv(partials * costs.partialBytesPerElement, costs.exchangeBytesPerCycle) +
              costs.syncCycles;
  }
  return cycles;
}

MatmulSplits planMatmul(const MatmulShape &shape, std::size_t numTiles,
                        const MatmulCosts &costs) {
  checkShape(shape);
  if (numTiles == 0) {
    throw std::invalid_argument("matmul planning needs at least one tile");
  }
  MatmulSplits best{1, 1, 1, 1};
  auto bestKey = std::make_tuple(std::numeric_limits<std::uint64_t>::max(), std::size_t(0),
                                 std::size_t(0), std::size_t(0), std::size_t(0), std::size_t(0));
  for (std::size_t gG = 1; gG <= std::min(shape.groups, numTiles); ++gG) {
    const std::size_t afterG = numTiles / gG;
    for (std::size_t gM = 1; gM <= std::min(shape.rows, afterG); ++gM) {
      const std::size_t afterM = afterG / gM;
      for (std::size_t gK = 1; gK <= std::min(shape.inner, afterM); ++gK) {
        const std::size_t afterK = afterM / gK;
        for (std::size_t gN = 1; gN <= std::min(shape.cols, afterK); ++gN) {
          const MatmulSplits splits{gG, gM, gK, gN};
          const auto key = std::make_tuple(matmulPartitionCycles(shape, splits, costs),
                                           splits.tilesUsed(), gG, gM, gK, gN);
          if (key < bestKey) {
            bestKey = key;
            best = splits;
          }
        }
      }
    }
  }
  return best;
}

TileMapping matmulLhsMapping(const MatmulShape &shape, const MatmulSplits &splits,
                             std::size_t numTiles) {
  checkSplits(shape, splits, numTiles);
  return blockSpreadMapping(
      {shape.groups, shape.rows, shape.inner}, {splits.groups, splits.rows, splits.inner},
      splits.cols, numTiles, [&](std::size_t g, std::size_t m, std::size_t k, std::size_t n) {
        return matmulTile(splits, g, m, k, n);
      });
}

TileMapping matmulRhsMapping(const MatmulShape &shape, const MatmulSplits &splits,
                             std::size_t numTiles) {
  checkSplits(shape, splits, numTiles);
  return blockSpreadMapping(
      {shape.groups, shape.inner, shape.cols}, {splits.groups, splits.inner, splits.cols},
      splits.rows, numTiles, [&](std::size_t g, std::size_t k, std::size_t n, std::size_t m) {
        return matmulTile(splits, g, m, k, n);
      });
}

TileMapping matmulOutputMapping(const MatmulShape &shape, const MatmulSplits &splits,
                                std::size_t numTiles) {
  checkSplits(shape, splits, numTiles);
  return blockSpreadMapping(
      {shape.groups, shape.rows, shape.cols}, {splits.groups, splits.rows, splits.cols},
      splits.inner, numTiles, [&](std::size_t g, std::size_t m, std::size_t n, std::size_t k) {
        return matmulTile(splits, g, m, k, n);
      });
}

} // namespace popart_unwind
