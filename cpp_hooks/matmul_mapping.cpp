#include "matmul_mapping.hpp"

#include "vertex_costs.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <tuple>

namespace popart_unwind {
namespace {

void checkShape(const MatmulShape &shape) {
  if (shape.groups == 0 || shape.rows == 0 || shape.inner == 0 || shape.cols == 0) {
    throw std::invalid_argument("matmul sizes G, M, K, N must all be at least 1");
  }
}

} // namespace

void checkMatmulSplits(const MatmulShape &shape, const MatmulSplits &s, std::size_t numTiles) {
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

namespace {

// Visit a row-major [A, B, C] tensor cut into blocks by `splits`: the elements of each block,
// in the block's own row-major order, are cut into `spread` nearly equal contiguous chunks and
// chunk j of block (a, b, c) goes to tile tileOf(a, b, c, j).
template <typename TileOf>
void forEachBlockChunk(const std::array<std::size_t, 3> &dims,
                       const std::array<std::size_t, 3> &splits, std::size_t spread,
                       TileOf tileOf,
                       const std::function<void(std::size_t, std::size_t, std::size_t)> &visit) {
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
          const std::size_t tile = tileOf(a, b, c, j);
          // Walk the block rows (fixed a, b; a run of nc elements along C) the chunk touches.
          for (std::size_t row = lo / nc; lo < hi && row * nc < hi; ++row) {
            const std::size_t first = std::max(lo, row * nc) - row * nc;
            const std::size_t last = std::min(hi, (row + 1) * nc) - row * nc;
            const std::size_t base = ((a0 + row / nb) * sizeB + (b0 + row % nb)) * sizeC + c0;
            visit(base + first, base + last, tile);
          }
        }
      }
    }
  }
}

std::size_t matmulTile(const MatmulSplits &s, std::size_t g, std::size_t m, std::size_t k,
                       std::size_t n) {
  return ((g * s.rows + m) * s.cols + n) * s.inner + k;
}

std::size_t axisSize(const MatmulShape &s, std::size_t axis) {
  return axis == 0 ? s.rows : axis == 1 ? s.inner : s.cols;
}

std::size_t axisSplit(const MatmulSplits &s, std::size_t axis) {
  return axis == 0 ? s.rows : axis == 1 ? s.inner : s.cols;
}

void checkPass(const PassAxes &axes) {
  if (axes[0] > 2 || axes[1] > 2 || axes[2] > 2 || axes[0] == axes[1] || axes[1] == axes[2] ||
      axes[0] == axes[2]) {
    throw std::invalid_argument("a pass must name each cube axis (0, 1, 2) once");
  }
}

} // namespace

MatmulCost partitionCost(const MatmulShape &shape, const MatmulSplits &splits,
                         const TileParams &params) {
  const std::uint64_t gB = ceilDiv(shape.groups, splits.groups);
  const std::uint64_t mB = ceilDiv(shape.rows, splits.rows);
  const std::uint64_t kB = ceilDiv(shape.inner, splits.inner);
  const std::uint64_t nB = ceilDiv(shape.cols, splits.cols);
  MatmulCost cost;
  if (params.vertexCosts) {
    // The AMP vertex over the tile's block, then the reduce vertex adding the inner split's
    // partials (or, unsplit, the cast of float partials to a half result).
    cost.compute = ampMatmulCycles(params, gB, mB, kB, nB);
    if (splits.inner > 1) {
      cost.compute += reduceVertexCycles(ceilDiv(gB * mB * nB, splits.inner), splits.inner,
                                         params.elementBytes > 2);
    } else if (params.elementBytes <= 2) {
      cost.compute += castVertexCycles(gB * mB * nB);
    }
  } else {
    cost.compute = ceilDiv(gB * mB * kB * nB, params.macsPerCycle);
  }
  // A tile already holds its own share of each operand block and receives the rest.
  const std::uint64_t lhsBlock = gB * mB * kB;
  const std::uint64_t rhsBlock = gB * kB * nB;
  const std::uint64_t received =
      (lhsBlock - lhsBlock / splits.cols) + (rhsBlock - rhsBlock / splits.rows);
  cost.exchange =
      ceilDiv(received * params.elementBytes, params.exchangeBytesPerCycle) + params.syncCycles;
  // The vertex writes the tile's output block as float partials (Poplibs counts them as the
  // convolution's temporary memory whether or not they are then reduced across tiles).
  cost.tempBytes = received * params.elementBytes + gB * mB * nB * params.partialBytesPerElement;
  if (splits.inner > 1) {
    // Each of the gK tiles of an output block sums one share of it: it receives that share's
    // partials from the other gK - 1 tiles, and holds its own partial block meanwhile.
    const std::uint64_t share = ceilDiv(gB * mB * nB, splits.inner);
    const std::uint64_t partials = share * (splits.inner - 1);
    cost.reduction =
        ceilDiv(partials * params.partialBytesPerElement, params.exchangeBytesPerCycle) +
        params.syncCycles;
    cost.tempBytes += partials * params.partialBytesPerElement;
  }
  return cost;
}

MatmulShape passShape(const MatmulShape &cube, const PassAxes &axes) {
  checkPass(axes);
  return {cube.groups, axisSize(cube, axes[0]), axisSize(cube, axes[1]),
          axisSize(cube, axes[2])};
}

MatmulSplits passSplits(const MatmulSplits &cube, const PassAxes &axes) {
  checkPass(axes);
  return {cube.groups, axisSplit(cube, axes[0]), axisSplit(cube, axes[1]),
          axisSplit(cube, axes[2])};
}

std::vector<MatmulSplits> matmulCandidates(const MatmulShape &cube,
                                           const std::vector<PassAxes> &passes,
                                           std::size_t count, const TileParams &params) {
  checkShape(cube);
  params.check();
  if (passes.empty() || count == 0) {
    throw std::invalid_argument("matmul candidates need at least one pass and a count of 1 or more");
  }
  std::vector<MatmulShape> shapes;
  for (const auto &axes : passes) {
    shapes.push_back(passShape(cube, axes));
  }
  // As Poplibs' planner: the quickest partition whose temporary bytes on a tile stay within
  // the limit in every pass; when none does, the one needing the fewest.
  using Key = std::tuple<bool, std::uint64_t, std::uint64_t, std::size_t, std::size_t,
                         std::size_t, std::size_t, std::size_t>;
  std::vector<Key> best; // sorted, at most `count`
  const std::size_t numTiles = params.numTiles;
  for (std::size_t gG = 1; gG <= std::min(cube.groups, numTiles); ++gG) {
    const std::size_t afterG = numTiles / gG;
    for (std::size_t gM = 1; gM <= std::min(cube.rows, afterG); ++gM) {
      const std::size_t afterM = afterG / gM;
      for (std::size_t gK = 1; gK <= std::min(cube.inner, afterM); ++gK) {
        const std::size_t afterK = afterM / gK;
        for (std::size_t gN = 1; gN <= std::min(cube.cols, afterK); ++gN) {
          const MatmulSplits splits{gG, gM, gK, gN};
          std::uint64_t cycles = 0;
          std::uint64_t tempBytes = 0;
          for (std::size_t p = 0; p < passes.size(); ++p) {
            const MatmulCost cost = partitionCost(shapes[p], passSplits(splits, passes[p]), params);
            cycles += cost.cycles();
            tempBytes = std::max(tempBytes, cost.tempBytes);
          }
          const bool over = tempBytes > params.tempBytesLimit;
          const Key key{over, over ? tempBytes : 0, cycles, splits.tilesUsed(), gG, gM, gK, gN};
          if (best.size() == count && !(key < best.back())) {
            continue;
          }
          best.insert(std::upper_bound(best.begin(), best.end(), key), key);
          if (best.size() > count) {
            best.pop_back();
          }
        }
      }
    }
  }
  std::vector<MatmulSplits> result;
  for (const auto &key : best) {
    result.push_back({std::get<4>(key), std::get<5>(key), std::get<6>(key), std::get<7>(key)});
  }
  return result;
}

MatmulSplits planMatmul(const MatmulShape &shape, const TileParams &params) {
  return matmulCandidates(shape, {PassAxes{0, 1, 2}}, 1, params).front();
}

std::size_t matmulElements(const MatmulShape &s, const std::string &operand) {
  if (operand == "lhs") {
    return s.groups * s.rows * s.inner;
  }
  if (operand == "rhs") {
    return s.groups * s.inner * s.cols;
  }
  if (operand == "output") {
    return s.groups * s.rows * s.cols;
  }
  throw std::invalid_argument("matmul operand must be lhs, rhs or output, not " + operand);
}

void forEachMatmulRun(const MatmulShape &shape, const MatmulSplits &s,
                      const std::string &operand, std::size_t numTiles,
                      const std::function<void(std::size_t, std::size_t, std::size_t)> &visit) {
  checkMatmulSplits(shape, s, numTiles);
  matmulElements(shape, operand); // refuses an unknown operand
  if (operand == "lhs") {
    forEachBlockChunk(
        {shape.groups, shape.rows, shape.inner}, {s.groups, s.rows, s.inner}, s.cols,
        [&](std::size_t g, std::size_t m, std::size_t k, std::size_t n) {
          return matmulTile(s, g, m, k, n);
        },
        visit);
  } else if (operand == "rhs") {
    forEachBlockChunk(
        {shape.groups, shape.inner, shape.cols}, {s.groups, s.inner, s.cols}, s.rows,
        [&](std::size_t g, std::size_t k, std::size_t n, std::size_t m) {
          return matmulTile(s, g, m, k, n);
        },
        visit);
  } else {
    forEachBlockChunk(
        {shape.groups, shape.rows, shape.cols}, {s.groups, s.rows, s.cols}, s.inner,
        [&](std::size_t g, std::size_t m, std::size_t n, std::size_t k) {
          return matmulTile(s, g, m, k, n);
        },
        visit);
  }
}

} // namespace popart_unwind
