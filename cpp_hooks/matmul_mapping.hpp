// Matmul partition model and the operand/output layouts it implies.
//
// A grouped matmul [G, M, K] x [G, K, N] -> [G, M, N] is treated as Poplibs treats it: a 1x1
// convolution with G conv groups, batch M, K input channels and N output channels. The work is
// cut into gG x gM x gK x gN blocks, one per tile; tile (g, m, k, n) multiplies LHS block
// (g, m, k) by RHS block (g, k, n) into a partial of output block (g, m, n), and the gK partials
// of each output block are summed. See docs/ipu-model.md for the cost and what it approximates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tile_params.hpp"

namespace popart_unwind {

// Sizes of a grouped matmul [G, M, K] x [G, K, N].
struct MatmulShape {
  std::size_t groups; // G
  std::size_t rows;   // M (the convolution's batch)
  std::size_t inner;  // K (input channels, the reduced axis)
  std::size_t cols;   // N (output channels)
};

// How many parts each axis is cut into (each at least 1, at most the axis size).
struct MatmulSplits {
  std::size_t groups;
  std::size_t rows;
  std::size_t inner;
  std::size_t cols;

  std::size_t tilesUsed() const { return groups * rows * inner * cols; }
};

// Throws std::invalid_argument unless every split lies between 1 and its axis size and the
// partition fits on numTiles tiles.
void checkMatmulSplits(const MatmulShape &shape, const MatmulSplits &splits,
                       std::size_t numTiles);

// What one partition of a matmul costs, in cycles of the busiest tile, and the temporary bytes
// it needs on a tile: the vertices' compute (Poplibs' AMP, reduce and cast estimates,
// vertex_costs.hpp; or the multiply-accumulates at peak rate alone); the exchange of the
// operand parts the tile does not hold, plus one sync; when the inner axis is split, the
// exchange of partial sums for the reduction plus another sync; the temporary bytes of the
// convolution or of the reduction phase, whichever is larger (Poplibs' count). Run in
// `serial` steps when no single step fits the bound: each term is the steps' total, and the
// reduction term also holds each further step's syncs.
struct MatmulCost {
  std::uint64_t compute = 0;
  std::uint64_t exchange = 0;
  std::uint64_t reduction = 0;
  std::uint64_t tempBytes = 0;
  std::uint64_t serial = 1; // serial steps over the rows

  std::uint64_t cycles() const { return compute + exchange + reduction; }
};

// The most serial steps a partition is run in.
constexpr std::uint64_t kMaxSerialSteps = 16;

// Which operand of a pass is the cube's RHS, read along the cube's row split by neighbouring
// tiles (so an even split receives it over shared exchange buses): the pass's RHS when its
// rows are the cube's rows, its LHS when its columns are.
enum class SharedOperand { None, Lhs, Rhs };

MatmulCost partitionCost(const MatmulShape &shape, const MatmulSplits &splits,
                         const TileParams &params, SharedOperand shared);

// Which axes of a cube of work [G, M, K, N] one pass multiplies as its rows, inner (reduced)
// axis and columns: 0 for M, 1 for K, 2 for N. {0, 1, 2} is the cube's own matmul; the passes
// of a fully connected layer planned together (Poplibs' fullyConnectedPass) share one cube:
// the backward pass is {0, 2, 1} ([M,N] x [N,K]), the weight update {1, 0, 2} ([K,M] x [M,N]).
using PassAxes = std::array<std::size_t, 3>;

// The shared operand of a pass (above).
SharedOperand sharedOperand(const PassAxes &axes);

// The shape and splits a pass computes, given the cube's.
MatmulShape passShape(const MatmulShape &cube, const PassAxes &axes);
MatmulSplits passSplits(const MatmulSplits &cube, const PassAxes &axes);

// The `count` partitions of the cube with the fewest cycles summed over `passes` (each pass
// costed as the matmul it computes), among all with gG*gM*gK*gN <= numTiles, best first; ties
// go to fewer tiles, then to the lexicographically smallest (gG, gM, gK, gN).
std::vector<MatmulSplits> matmulCandidates(const MatmulShape &cube,
                                           const std::vector<PassAxes> &passes,
                                           std::size_t count, const TileParams &params);

// The cheapest partition of one matmul: matmulCandidates with the cube's own pass, count 1.
MatmulSplits planMatmul(const MatmulShape &shape, const TileParams &params);

// Calls visit(begin, end, tile) for runs of row-major elements of one matmul tensor
// ("lhs" [G, M, K], "rhs" [G, K, N] or "output" [G, M, N]) covering each element once. Each
// block is spread in nearly equal contiguous chunks over the tiles that use it: an LHS block
// (g, m, k) over the gN tiles (g, m, k, *) that read it, an RHS block over the gM readers, an
// output block over the gK tiles that reduce its partial sums. Tile (g, m, k, n) is
// ((g * gK + k) * gN + n) * gM + m: as Poplibs orders a plan's tiles, the gM tiles reading one
// RHS block are neighbours, so pairs of them share a super tile's exchange bus.
void forEachMatmulRun(const MatmulShape &shape, const MatmulSplits &splits,
                      const std::string &operand, std::size_t numTiles,
                      const std::function<void(std::size_t, std::size_t, std::size_t)> &visit);

// Elements of one matmul tensor (`operand` as above).
std::size_t matmulElements(const MatmulShape &shape, const std::string &operand);

} // namespace popart_unwind
