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
  return ((g * s.inner + k) * s.cols + n) * s.rows + m;
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

namespace {

// One serial step's cost: the partition run on `shape` (a step's rows when split serially).
MatmulCost stepCost(const MatmulShape &shape, const MatmulSplits &splits,
                    const TileParams &params, SharedOperand shared) {
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
  // A tile already holds its own share of each operand block and receives the rest. The
  // cube's RHS is read by the tiles of its row split, neighbours in the tile order: with an
  // even split, the two tiles of each super tile receive it together over their shared
  // exchange bus, at twice the rate (Poplibs' ExchangeEstimator). In a pass, that is its RHS
  // (read along the pass's rows) or its LHS (along its columns).
  const std::uint64_t lhsBlock = gB * mB * kB;
  const std::uint64_t rhsBlock = gB * kB * nB;
  const std::uint64_t lhsReceived = lhsBlock - lhsBlock / splits.cols;
  const std::uint64_t rhsReceived = rhsBlock - rhsBlock / splits.rows;
  const std::uint64_t bus = params.tilesPerExchangeBus;
  const std::uint64_t lhsShare =
      shared == SharedOperand::Lhs && splits.cols % bus == 0 ? bus : 1;
  const std::uint64_t rhsShare =
      shared == SharedOperand::Rhs && splits.rows % bus == 0 ? bus : 1;
  const std::uint64_t both = lhsShare * rhsShare; // one of the two is 1
  cost.exchange = ceilDiv((lhsReceived * rhsShare + rhsReceived * lhsShare) *
                              params.elementBytes,
                          params.exchangeBytesPerCycle * both) +
                  params.syncCycles;
  // Temporary bytes as Poplibs' planner counts them: the larger of the convolution phase (the
  // tile's whole operand blocks, copied in, and its float partials) and the reduction phase
  // (the partials, and the shares of the other tiles' partials it receives).
  const std::uint64_t partials = gB * mB * nB * params.partialBytesPerElement;
  const std::uint64_t convolving = (lhsBlock + rhsBlock) * params.elementBytes + partials;
  std::uint64_t reducing = 0;
  if (splits.inner > 1) {
    // Each of the gK tiles of an output block sums one share of it: it receives that share's
    // partials from the other gK - 1 tiles.
    const std::uint64_t share = ceilDiv(gB * mB * nB, splits.inner);
    const std::uint64_t received = share * (splits.inner - 1) * params.partialBytesPerElement;
    cost.reduction = ceilDiv(received, params.exchangeBytesPerCycle) + params.syncCycles;
    reducing = partials + received;
  }
  cost.tempBytes = std::max(convolving, reducing);
  return cost;
}

} // namespace

MatmulCost partitionCost(const MatmulShape &shape, const MatmulSplits &splits,
                         const TileParams &params, SharedOperand shared) {
  // Poplibs splits the output channels serially (the rows here: Poplibs runs a matmul with
  // its operands swapped) when no parallel split alone fits the temporary-memory bound: the
  // fewest steps that do, each a partition of its share of the rows that receives the whole
  // RHS block again. Without one that fits, the steps of least temporary memory.
  MatmulCost best;
  std::uint64_t bestSteps = 0;
  const std::uint64_t most =
      std::min<std::uint64_t>(kMaxSerialSteps, ceilDiv(shape.rows, splits.rows));
  for (std::uint64_t steps = 1; steps <= most; ++steps) {
    MatmulShape step = shape;
    step.rows = ceilDiv(shape.rows, steps);
    if (step.rows < splits.rows) {
      break;
    }
    const MatmulCost cost = stepCost(step, splits, params, shared);
    if (bestSteps == 0 || cost.tempBytes < best.tempBytes) {
      best = cost;
      bestSteps = steps;
    }
    if (cost.tempBytes <= params.tempBytesLimit) {
      break;
    }
  }
  best.compute *= bestSteps;
  best.exchange *= bestSteps;
  // the steps' partial sums, and each further step's syncs
  best.reduction = best.reduction * bestSteps + (bestSteps - 1) * params.syncCycles;
  best.serial = bestSteps;
  return best;
}

SharedOperand sharedOperand(const PassAxes &axes) {
  checkPass(axes);
  return axes[0] == 0 ? SharedOperand::Rhs : axes[2] == 0 ? SharedOperand::Lhs
                                                          : SharedOperand::None;
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
            const MatmulCost cost = partitionCost(shapes[p], passSplits(splits, passes[p]),
                                                  params, sharedOperand(passes[p]));
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
