// Counting kernels over per-element tile arrays (part of module popart_unwind._hooks): how
// many elements lie on each tile, what a matmul's reading tiles already hold of the blocks
// they read, and each tile's runs (Poplar's interval format). They run on real model sizes
// (an embedding table has tens of millions of elements and runs), so they widen nothing,
// make no temporary per-element or per-run arrays, and make one or two passes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace popart_unwind {
namespace {

template <typename T> using Tiles = py::array_t<T, py::array::c_style>;

// Element e's tile id, refused unless it lies in [0, numTiles).
template <typename T>
std::size_t checkedTile(const T *ids, std::size_t e, std::size_t numTiles) {
  const auto id = static_cast<std::int64_t>(ids[e]);
  if (id < 0 || static_cast<std::size_t>(id) >= numTiles) {
    throw std::invalid_argument("tile id " + std::to_string(id) + " of element " +
                                std::to_string(e) + " is not in [0, " +
                                std::to_string(numTiles) + ")");
  }
  return static_cast<std::size_t>(id);
}

// Elements on each tile (numpy's bincount without widening the ids to 64 bits first).
template <typename T>
py::array_t<std::int64_t> tileCounts(const Tiles<T> &tiles, std::size_t numTiles) {
  py::array_t<std::int64_t> counts(static_cast<py::ssize_t>(numTiles));
  std::int64_t *c = counts.mutable_data();
  std::fill(c, c + numTiles, 0);
  const T *ids = tiles.data();
  const auto n = static_cast<std::size_t>(tiles.size());
  for (std::size_t e = 0; e < n; ++e) {
    ++c[checkedTile(ids, e, numTiles)];
  }
  return counts;
}

// What matmul_readers counts of an operand laid out as `tiles`, element by element: the
// runs of each block (a run starts where a block, or a gap in one, starts or the tile
// changes), and the elements and runs each tile holds of the block it reads (tileBlock[t],
// -1: none). Both kernels below feed it.
template <typename T> class ReaderCounts {
public:
  ReaderCounts(const Tiles<T> &tiles, const Tiles<std::int64_t> &tileBlock,
               std::size_t numBlocks)
      : ids_(tiles.data()), tileBlock_(tileBlock.data()),
        numTiles_(static_cast<std::size_t>(tileBlock.size())), numBlocks_(numBlocks),
        runs_(static_cast<py::ssize_t>(numBlocks)),
        heldElements_(static_cast<py::ssize_t>(numTiles_)),
        heldRuns_(static_cast<py::ssize_t>(numTiles_)), r_(runs_.mutable_data()),
        he_(heldElements_.mutable_data()), hr_(heldRuns_.mutable_data()) {
    std::fill(r_, r_ + numBlocks_, 0);
    std::fill(he_, he_ + numTiles_, 0);
    std::fill(hr_, hr_ + numTiles_, 0);
  }

  // Element e lies in `block`; `blockStart`: a block, or a gap in one, begins at e.
  void add(std::size_t e, std::int64_t block, bool blockStart) {
    const auto tile = checkedTile(ids_, e, numTiles_);
    if (block < 0 || static_cast<std::size_t>(block) >= numBlocks_) {
      throw std::invalid_argument("block " + std::to_string(block) + " is out of range");
    }
    const bool start = blockStart || e == 0 || ids_[e] != ids_[e - 1];
    r_[block] += start ? 1 : 0;
    if (tileBlock_[tile] == block) {
      ++he_[tile];
      hr_[tile] += start ? 1 : 0;
    }
  }

  // (runs per block, elements each tile holds of its block, runs each tile holds of it).
  py::tuple result() const { return py::make_tuple(runs_, heldElements_, heldRuns_); }

private:
  const T *ids_;
  const std::int64_t *tileBlock_;
  std::size_t numTiles_, numBlocks_;
  py::array_t<std::int64_t> runs_, heldElements_, heldRuns_;
  std::int64_t *r_, *he_, *hr_;
};

// ReaderCounts over an operand whose element e lies in block blocks[e], blockStarts[e]
// marking where a block (or a gap in one) begins: one pass.
template <typename T>
py::tuple blockReaderCounts(const Tiles<T> &tiles, const Tiles<std::int32_t> &blocks,
                            const py::array_t<bool, py::array::c_style> &blockStarts,
                            const Tiles<std::int64_t> &tileBlock, std::size_t numBlocks) {
  const auto n = static_cast<std::size_t>(tiles.size());
  if (static_cast<std::size_t>(blocks.size()) != n ||
      static_cast<std::size_t>(blockStarts.size()) != n) {
    throw std::invalid_argument("tiles, blocks and block starts must have one entry each");
  }
  ReaderCounts<T> counts(tiles, tileBlock, numBlocks);
  const std::int32_t *b = blocks.data();
  const bool *bs = blockStarts.data();
  for (std::size_t e = 0; e < n; ++e) {
    counts.add(e, b[e], bs[e]);
  }
  return counts.result();
}

// ReaderCounts over an [A, B, C] operand cut into a grid of blocks, without per-element
// block arrays: element (i, j, k) lies in block (partsA[i] * countB + partsB[j]) * countC +
// partsC[k] (each axis's part per index); a block starts where the block changes.
template <typename T>
py::tuple gridReaderCounts(const Tiles<T> &tiles, const Tiles<std::int64_t> &partsA,
                           const Tiles<std::int64_t> &partsB,
                           const Tiles<std::int64_t> &partsC, std::int64_t countB,
                           std::int64_t countC, const Tiles<std::int64_t> &tileBlock,
                           std::size_t numBlocks) {
  const auto sizeA = static_cast<std::size_t>(partsA.size());
  const auto sizeB = static_cast<std::size_t>(partsB.size());
  const auto sizeC = static_cast<std::size_t>(partsC.size());
  if (sizeA * sizeB * sizeC != static_cast<std::size_t>(tiles.size())) {
    throw std::invalid_argument("the grid's axes do not hold one entry per element");
  }
  ReaderCounts<T> counts(tiles, tileBlock, numBlocks);
  const std::int64_t *pa = partsA.data(), *pb = partsB.data(), *pc = partsC.data();
  std::size_t e = 0;
  std::int64_t previous = -1;
  for (std::size_t i = 0; i < sizeA; ++i) {
    for (std::size_t j = 0; j < sizeB; ++j) {
      const std::int64_t row = (pa[i] * countB + pb[j]) * countC;
      for (std::size_t k = 0; k < sizeC; ++k, ++e) {
        const std::int64_t block = row + pc[k];
        counts.add(e, block, block != previous);
        previous = block;
      }
    }
  }
  return counts.result();
}

// Each tile's maximal runs of equal ids, in flat order (Poplar's interval format): returns
// (bounds, begins, ends) where tile t's runs are begins[bounds[t]:bounds[t+1]] and the same
// slice of ends. bounds is int64 (numTiles + 1 entries); begins and ends are int32 when every
// offset fits, else int64. Two passes: count each tile's runs, then place them (a counting
// sort, so runs keep their flat order within a tile).
template <typename T, typename I>
py::tuple runsAs(const T *ids, std::size_t n, std::size_t numTiles) {
  py::array_t<std::int64_t> bounds(static_cast<py::ssize_t>(numTiles + 1));
  std::int64_t *b = bounds.mutable_data();
  std::fill(b, b + numTiles + 1, 0);
  for (std::size_t e = 0; e < n; ++e) {
    if (e == 0 || ids[e] != ids[e - 1]) {
      ++b[checkedTile(ids, e, numTiles) + 1];
    }
  }
  for (std::size_t t = 0; t < numTiles; ++t) {
    b[t + 1] += b[t];
  }
  const auto numRuns = static_cast<py::ssize_t>(b[numTiles]);
  py::array_t<I> begins(numRuns);
  py::array_t<I> ends(numRuns);
  I *begin = begins.mutable_data();
  I *end = ends.mutable_data();
  std::vector<std::int64_t> next(b, b + numTiles);
  for (std::size_t e = 0; e < n;) {
    std::size_t stop = e + 1;
    while (stop < n && ids[stop] == ids[e]) {
      ++stop;
    }
    const auto slot = next[static_cast<std::size_t>(ids[e])]++;
    begin[slot] = static_cast<I>(e);
    end[slot] = static_cast<I>(stop);
    e = stop;
  }
  return py::make_tuple(bounds, begins, ends);
}

// How many maximal runs of equal ids a tile-id array has (what tileRuns would return),
// without building them: the caller keeps whichever form of a layout is smaller.
template <typename T> std::size_t runCount(const Tiles<T> &tiles) {
  const T *ids = tiles.data();
  const auto n = static_cast<std::size_t>(tiles.size());
  std::size_t runs = n ? 1 : 0;
  for (std::size_t e = 1; e < n; ++e) {
    runs += ids[e] != ids[e - 1] ? 1 : 0;
  }
  return runs;
}

template <typename T> py::tuple tileRuns(const Tiles<T> &tiles, std::size_t numTiles) {
  const auto n = static_cast<std::size_t>(tiles.size());
  if (n <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    return runsAs<T, std::int32_t>(tiles.data(), n, numTiles);
  }
  return runsAs<T, std::int64_t>(tiles.data(), n, numTiles);
}

template <typename T> void bindFor(py::module_ &m) {
  m.def("block_reader_counts", &blockReaderCounts<T>, py::arg("tiles").noconvert(),
        py::arg("blocks").noconvert(), py::arg("block_starts").noconvert(),
        py::arg("tile_block").noconvert(), py::arg("num_blocks"),
        "Runs per block, and elements and runs each tile holds of the block it reads.");
  m.def("grid_reader_counts", &gridReaderCounts<T>, py::arg("tiles").noconvert(),
        py::arg("parts_a").noconvert(), py::arg("parts_b").noconvert(),
        py::arg("parts_c").noconvert(), py::arg("count_b"), py::arg("count_c"),
        py::arg("tile_block").noconvert(), py::arg("num_blocks"),
        "block_reader_counts for an operand cut into a grid of blocks, each axis's part "
        "per index given instead of each element's block.");
  m.def("tile_counts", &tileCounts<T>, py::arg("tiles").noconvert(), py::arg("num_tiles"),
        "How many elements of a tile-id array lie on each tile (int64, num_tiles long).");
  m.def("run_count", &runCount<T>, py::arg("tiles").noconvert(),
        "How many maximal runs of equal ids a tile-id array has.");
  m.def("tile_runs", &tileRuns<T>, py::arg("tiles").noconvert(), py::arg("num_tiles"),
        "Each tile's runs in flat order: (bounds, begins, ends), Poplar's interval format.");
}

} // namespace

void bindCounting(py::module_ &m) {
  bindFor<std::int16_t>(m);
  bindFor<std::int32_t>(m);
}

} // namespace popart_unwind
