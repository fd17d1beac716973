// Counting kernels over per-element tile arrays (part of module popart_unwind._hooks): how
// many elements lie on each tile, and what a matmul's reading tiles already hold of the
// blocks they read. Both run once per op on real model sizes, so they widen nothing and make
// one pass.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

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

// What matmul_readers counts, in one pass over an operand laid out as `tiles`: element e
// lies in block blocks[e]; a run starts where a block starts (blockStarts) or the tile
// changes; tile t reads block tileBlock[t] (-1: none). Returns (runs per block, elements
// each tile holds of the block it reads, runs each tile holds of it).
template <typename T>
py::tuple blockReaderCounts(const Tiles<T> &tiles, const Tiles<std::int32_t> &blocks,
                            const py::array_t<bool, py::array::c_style> &blockStarts,
                            const Tiles<std::int64_t> &tileBlock, std::size_t numBlocks) {
  const auto n = static_cast<std::size_t>(tiles.size());
  const auto numTiles = static_cast<std::size_t>(tileBlock.size());
  if (static_cast<std::size_t>(blocks.size()) != n ||
      static_cast<std::size_t>(blockStarts.size()) != n) {
    throw std::invalid_argument("tiles, blocks and block starts must have one entry each");
  }
  py::array_t<std::int64_t> runs(static_cast<py::ssize_t>(numBlocks));
  py::array_t<std::int64_t> heldElements(static_cast<py::ssize_t>(numTiles));
  py::array_t<std::int64_t> heldRuns(static_cast<py::ssize_t>(numTiles));
  std::int64_t *r = runs.mutable_data();
  std::int64_t *he = heldElements.mutable_data();
  std::int64_t *hr = heldRuns.mutable_data();
  std::fill(r, r + numBlocks, 0);
  std::fill(he, he + numTiles, 0);
  std::fill(hr, hr + numTiles, 0);
  const T *ids = tiles.data();
  const std::int32_t *b = blocks.data();
  const bool *bs = blockStarts.data();
  const std::int64_t *tb = tileBlock.data();
  for (std::size_t e = 0; e < n; ++e) {
    const auto tile = checkedTile(ids, e, numTiles);
    if (b[e] < 0 || static_cast<std::size_t>(b[e]) >= numBlocks) {
      throw std::invalid_argument("block " + std::to_string(b[e]) + " is out of range");
    }
    const bool start = bs[e] || e == 0 || ids[e] != ids[e - 1];
    r[b[e]] += start ? 1 : 0;
    if (tb[tile] == b[e]) {
      ++he[tile];
      hr[tile] += start ? 1 : 0;
    }
  }
  return py::make_tuple(runs, heldElements, heldRuns);
}

template <typename T> void bindFor(py::module_ &m) {
  m.def("block_reader_counts", &blockReaderCounts<T>, py::arg("tiles").noconvert(),
        py::arg("blocks").noconvert(), py::arg("block_starts").noconvert(),
        py::arg("tile_block").noconvert(), py::arg("num_blocks"),
        "Runs per block, and elements and runs each tile holds of the block it reads.");
  m.def("tile_counts", &tileCounts<T>, py::arg("tiles").noconvert(), py::arg("num_tiles"),
        "How many elements of a tile-id array lie on each tile (int64, num_tiles long).");
}

} // namespace

void bindCounting(py::module_ &m) {
  bindFor<std::int16_t>(m);
  bindFor<std::int32_t>(m);
}

} // namespace popart_unwind
