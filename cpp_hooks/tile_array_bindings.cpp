// Bindings of the tile-array forms of the hooks (part of module popart_unwind._hooks).
//
// Each fill_* function writes into a C-contiguous int16 or int32 numpy array the caller made
// (the planner's tile dtype), never a converted copy: a dtype mismatch is a TypeError.
// poplar_mapping builds Poplar's format (per tile, a list of (begin, end) tuples) from such
// an array directly with the Python C API; tile_counts counts the elements on each tile.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "linear_mapping.hpp"
#include "matmul_mapping.hpp"
#include "sliceable_mapping.hpp"
#include "tile_arrays.hpp"

namespace py = pybind11;

namespace popart_unwind {
namespace {

template <typename T> using Tiles = py::array_t<T, py::array::c_style>;

template <typename T> T *writable(Tiles<T> &out, std::size_t numElements) {
  if (out.ndim() != 1 || static_cast<std::size_t>(out.shape(0)) != numElements) {
    throw std::invalid_argument("the output array must be flat with " +
                                std::to_string(numElements) + " elements");
  }
  return out.mutable_data();
}

TileMapping matmulMapping(const std::string &operand, const MatmulShape &shape,
                          const MatmulSplits &splits, std::size_t numTiles) {
  if (operand == "lhs") {
    return matmulLhsMapping(shape, splits, numTiles);
  }
  if (operand == "rhs") {
    return matmulRhsMapping(shape, splits, numTiles);
  }
  if (operand == "output") {
    return matmulOutputMapping(shape, splits, numTiles);
  }
  throw std::invalid_argument("matmul operand must be lhs, rhs or output, not " + operand);
}

std::size_t matmulElements(const std::string &operand, const MatmulShape &s) {
  if (operand == "lhs") {
    return s.groups * s.rows * s.inner;
  }
  if (operand == "rhs") {
    return s.groups * s.inner * s.cols;
  }
  return s.groups * s.rows * s.cols;
}

template <typename T>
void fillMatmulTiles(Tiles<T> out, std::size_t groups, std::size_t rows, std::size_t inner,
                     std::size_t cols, const std::array<std::size_t, 4> &splits,
                     std::size_t numTiles, const std::string &operand) {
  const MatmulShape shape{groups, rows, inner, cols};
  const TileMapping mapping =
      matmulMapping(operand, shape, MatmulSplits{splits[0], splits[1], splits[2], splits[3]},
                    numTiles);
  const std::size_t numElements = matmulElements(operand, shape);
  fillTiles(mapping, writable(out, numElements), numElements, "matmul " + operand);
}

template <typename T>
void fillSliceable(Tiles<T> out, std::size_t numRows, std::size_t numCols,
                   std::size_t numTiles, std::size_t grainSize) {
  const SliceableLayout layout = sliceableLayout(numRows, numCols, numTiles, grainSize);
  fillSliceableTiles(layout, writable(out, numRows * numCols));
}

// Returns how many tiles the mapping uses (PopART's linear mapper advances by that much).
template <typename T>
std::size_t fillLinear(Tiles<T> out, std::size_t numElements, std::size_t numTiles,
                       std::size_t grainSize, std::size_t minElementsPerTile,
                       std::size_t startTile) {
  const TileMapping mapping = rotatedLinearTileMapping(numElements, numTiles, grainSize,
                                                       minElementsPerTile, startTile);
  fillTiles(mapping, writable(out, numElements), numElements, "linear mapping");
  std::size_t used = 0;
  for (const auto &intervals : mapping) {
    used += intervals.empty() ? 0 : 1;
  }
  return used;
}

PyObject *checked(PyObject *object) {
  if (object == nullptr) {
    throw py::error_already_set();
  }
  return object;
}

// Per tile, its maximal runs of equal consecutive ids as (begin, end) tuples, in order.
// Each run boundary is one int object, shared by the run ending and the run starting there
// (half the allocations); the tuples are made tile by tile, so that each tile's are freed
// together later (scattered over the heap, freeing them costs cache misses).
template <typename T> py::list poplarMapping(const Tiles<T> &tiles, std::size_t numTiles) {
  if (tiles.ndim() != 1) {
    throw std::invalid_argument("poplar_mapping needs a flat array of tile ids");
  }
  const T *ids = tiles.data();
  const std::size_t n = static_cast<std::size_t>(tiles.shape(0));
  std::vector<std::size_t> first(numTiles + 1, 0); // tile t's runs: [first[t], first[t+1])
  std::vector<std::size_t> starts;                  // run starts in flat order, then n
  for (std::size_t e = 0; e < n; ++e) {
    const auto id = static_cast<std::int64_t>(ids[e]);
    if (id < 0 || static_cast<std::size_t>(id) >= numTiles) {
      throw std::invalid_argument("tile id " + std::to_string(id) + " of element " +
                                  std::to_string(e) + " is not in [0, " +
                                  std::to_string(numTiles) + ")");
    }
    if (e == 0 || ids[e] != ids[e - 1]) {
      ++first[static_cast<std::size_t>(id) + 1];
      starts.push_back(e);
    }
  }
  starts.push_back(n);
  for (std::size_t tile = 0; tile < numTiles; ++tile) {
    first[tile + 1] += first[tile];
  }
  std::vector<std::size_t> order(starts.size() - 1); // run indices, tile by tile
  std::vector<std::size_t> next(first.begin(), first.end() - 1);
  for (std::size_t run = 0; run + 1 < starts.size(); ++run) {
    order[next[static_cast<std::size_t>(ids[starts[run]])]++] = run;
  }
  std::vector<py::object> bounds(starts.size());
  for (std::size_t k = 0; k < starts.size(); ++k) {
    bounds[k] = py::reinterpret_steal<py::object>(checked(PyLong_FromSize_t(starts[k])));
  }
  py::list mapping(numTiles);
  for (std::size_t tile = 0; tile < numTiles; ++tile) {
    const auto count = static_cast<Py_ssize_t>(first[tile + 1] - first[tile]);
    PyObject *runs = checked(PyList_New(count));
    PyList_SET_ITEM(mapping.ptr(), static_cast<Py_ssize_t>(tile), runs);
    for (std::size_t slot = first[tile]; slot < first[tile + 1]; ++slot) {
      const std::size_t run = order[slot];
      PyObject *pair = checked(PyTuple_New(2));
      PyList_SET_ITEM(runs, static_cast<Py_ssize_t>(slot - first[tile]), pair);
      PyTuple_SET_ITEM(pair, 0, bounds[run].inc_ref().ptr());
      PyTuple_SET_ITEM(pair, 1, bounds[run + 1].inc_ref().ptr());
      // A pair of ints is never part of a cycle; left tracked, millions of them would make
      // the cyclic collector walk them all (CPython untracks such tuples itself, lazily).
      PyObject_GC_UnTrack(pair);
    }
  }
  return mapping;
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
    const auto id = static_cast<std::int64_t>(ids[e]);
    if (id < 0 || static_cast<std::size_t>(id) >= numTiles) {
      throw std::invalid_argument("tile id " + std::to_string(id) + " of element " +
                                  std::to_string(e) + " is not in [0, " +
                                  std::to_string(numTiles) + ")");
    }
    ++c[id];
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
    const auto tile = static_cast<std::int64_t>(ids[e]);
    if (tile < 0 || static_cast<std::size_t>(tile) >= numTiles) {
      throw std::invalid_argument("tile id " + std::to_string(tile) + " of element " +
                                  std::to_string(e) + " is not in [0, " +
                                  std::to_string(numTiles) + ")");
    }
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
  m.def("fill_matmul_tiles", &fillMatmulTiles<T>, py::arg("out").noconvert(),
        py::arg("groups"), py::arg("rows"), py::arg("inner"), py::arg("cols"),
        py::arg("splits"), py::arg("num_tiles"), py::arg("operand"),
        "Write each element's tile of a matmul operand (lhs, rhs, output) into out.");
  m.def("fill_sliceable_tiles", &fillSliceable<T>, py::arg("out").noconvert(),
        py::arg("num_rows"), py::arg("num_cols"), py::arg("num_tiles"),
        py::arg("grain_size") = 1, "Write each element's tile of a sliceable table into out.");
  m.def("fill_linear_tiles", &fillLinear<T>, py::arg("out").noconvert(),
        py::arg("num_elements"), py::arg("num_tiles"), py::arg("grain_size"),
        py::arg("min_elements_per_tile"), py::arg("start_tile"),
        "Write each element's tile of a rotated linear mapping into out; return the number\n"
        "of tiles it uses.");
  m.def("block_reader_counts", &blockReaderCounts<T>, py::arg("tiles").noconvert(),
        py::arg("blocks").noconvert(), py::arg("block_starts").noconvert(),
        py::arg("tile_block").noconvert(), py::arg("num_blocks"),
        "Runs per block, and elements and runs each tile holds of the block it reads.");
  m.def("tile_counts", &tileCounts<T>, py::arg("tiles").noconvert(), py::arg("num_tiles"),
        "How many elements of a tile-id array lie on each tile (int64, num_tiles long).");
  m.def("poplar_mapping", &poplarMapping<T>, py::arg("tiles").noconvert(),
        py::arg("num_tiles"),
        "Poplar's format (per tile, (begin, end) runs in order) of a flat tile-id array.");
}

} // namespace

void bindTileArrays(py::module_ &m) {
  bindFor<std::int16_t>(m);
  bindFor<std::int32_t>(m);
}

} // namespace popart_unwind
