// Python bindings of the C++ layout hooks: module popart_unwind._hooks.
//
// Mappings cross the boundary in Poplar's format: a list with one list of half-open
// (begin, end) element intervals per tile (tile_array_bindings.cpp adds per-element tile
// arrays, for real model sizes). Bad arguments raise ValueError; the Python face
// (popart_unwind.target.hooks) validates first and turns these into TargetError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>

#include "bias_mapping.hpp"
#include "elementwise_choice.hpp"
#include "linear_mapping.hpp"
#include "matmul_mapping.hpp"
#include "sliceable_mapping.hpp"

namespace py = pybind11;
using namespace popart_unwind;

namespace popart_unwind {
// tile_array_bindings.cpp: the hooks' answers as per-element tile arrays.
void bindTileArrays(py::module_ &m);
} // namespace popart_unwind

namespace {

using Splits = std::array<std::size_t, 4>;

MatmulSplits toSplits(const Splits &s) { return MatmulSplits{s[0], s[1], s[2], s[3]}; }

MatmulCosts toCosts(std::size_t bytesPerElement, std::size_t partialBytesPerElement,
                    std::size_t exchangeBytesPerCycle, std::size_t macsPerCycle,
                    std::size_t syncCycles) {
  return MatmulCosts{bytesPerElement, partialBytesPerElement, exchangeBytesPerCycle,
                     macsPerCycle, syncCycles};
}

// The sliceable table layout as two int64 arrays: tile t holds intervals[starts[t]:starts[t+1]].
// Written straight from the layout: building millions of Python tuples (or of C++ vectors
// first) is what makes real embedding tables slow.
py::tuple sliceableTableArrays(std::size_t numRows, std::size_t numCols, std::size_t numTiles,
                               std::size_t grainSize) {
  const SliceableLayout layout = sliceableLayout(numRows, numCols, numTiles, grainSize);
  py::array_t<std::int64_t> starts(static_cast<py::ssize_t>(numTiles + 1));
  auto s = starts.mutable_unchecked<1>();
  std::size_t total = 0;
  for (std::size_t tile = 0; tile < numTiles; ++tile) {
    s(static_cast<py::ssize_t>(tile)) = static_cast<std::int64_t>(total);
    total += tile < layout.tilesUsed() ? layout.numIntervals(tile) : 0;
  }
  s(static_cast<py::ssize_t>(numTiles)) = static_cast<std::int64_t>(total);
  py::array_t<std::int64_t> flat({static_cast<py::ssize_t>(total), py::ssize_t(2)});
  auto f = flat.mutable_unchecked<2>();
  py::ssize_t row = 0;
  for (std::size_t tile = 0; tile < layout.tilesUsed(); ++tile) {
    const std::size_t colBegin = layout.colBegin(tile);
    const std::size_t colEnd = layout.colEnd(tile);
    const std::size_t rowBegin = layout.rowBegin(tile);
    const std::size_t rowEnd = layout.rowEnd(tile);
    if (layout.colParts == 1) {
      f(row, 0) = static_cast<std::int64_t>(rowBegin * numCols);
      f(row, 1) = static_cast<std::int64_t>(rowEnd * numCols);
      ++row;
      continue;
    }
    for (std::size_t r = rowBegin; r < rowEnd; ++r) {
      f(row, 0) = static_cast<std::int64_t>(r * numCols + colBegin);
      f(row, 1) = static_cast<std::int64_t>(r * numCols + colEnd);
      ++row;
    }
  }
  return py::make_tuple(starts, flat);
}

} // namespace

PYBIND11_MODULE(_hooks, m) {
  m.doc() = "C++ layout hooks of the IPU Model target (tile mappings in Poplar's format).";

  m.def(
      "linear_tile_mapping",
      [](std::size_t numElements, std::size_t numTiles, std::size_t grainSize,
         std::size_t minElementsPerTile, std::size_t startTile) {
        return rotatedLinearTileMapping(numElements, numTiles, grainSize, minElementsPerTile,
                                        startTile);
      },
      py::arg("num_elements"), py::arg("num_tiles"), py::arg("grain_size") = 1,
      py::arg("min_elements_per_tile") = 0, py::arg("start_tile") = 0,
      "Spread a flattened tensor linearly over tiles (Poplibs' calcLinearTileMapping rule),\n"
      "then rotate it so that it starts at start_tile.");

  m.def(
      "matmul_partition_cycles",
      [](std::size_t groups, std::size_t rows, std::size_t inner, std::size_t cols,
         const Splits &splits, std::size_t bytesPerElement, std::size_t partialBytesPerElement,
         std::size_t exchangeBytesPerCycle, std::size_t macsPerCycle, std::size_t syncCycles) {
        return matmulPartitionCycles(MatmulShape{groups, rows, inner, cols}, toSplits(splits),
                                     toCosts(bytesPerElement, partialBytesPerElement,
                                             exchangeBytesPerCycle, macsPerCycle, syncCycles));
      },
      py::arg("groups"), py::arg("rows"), py::arg("inner"), py::arg("cols"), py::arg("splits"),
      py::arg("bytes_per_element"), py::arg("partial_bytes_per_element"),
      py::arg("exchange_bytes_per_cycle"), py::arg("macs_per_cycle"), py::arg("sync_cycles"),
      "Estimated cycles of a [G,M,K]x[G,K,N] matmul cut by splits (gG, gM, gK, gN).");

  m.def(
      "plan_matmul",
      [](std::size_t groups, std::size_t rows, std::size_t inner, std::size_t cols,
         std::size_t numTiles, std::size_t bytesPerElement, std::size_t partialBytesPerElement,
         std::size_t exchangeBytesPerCycle, std::size_t macsPerCycle, std::size_t syncCycles) {
        const MatmulSplits s =
            planMatmul(MatmulShape{groups, rows, inner, cols}, numTiles,
                       toCosts(bytesPerElement, partialBytesPerElement, exchangeBytesPerCycle,
                               macsPerCycle, syncCycles));
        return std::make_tuple(s.groups, s.rows, s.inner, s.cols);
      },
      py::arg("groups"), py::arg("rows"), py::arg("inner"), py::arg("cols"), py::arg("num_tiles"),
      py::arg("bytes_per_element"), py::arg("partial_bytes_per_element"),
      py::arg("exchange_bytes_per_cycle"), py::arg("macs_per_cycle"), py::arg("sync_cycles"),
      "The splits (gG, gM, gK, gN) with the fewest estimated cycles on num_tiles tiles.");

  const char *operandDoc = "Mapping of one matmul tensor for the partition given by splits.";
  m.def(
      "matmul_lhs_mapping",
      [](std::size_t groups, std::size_t rows, std::size_t inner, std::size_t cols,
         const Splits &splits, std::size_t numTiles) {
        return matmulLhsMapping(MatmulShape{groups, rows, inner, cols}, toSplits(splits),
                                numTiles);
      },
      py::arg("groups"), py::arg("rows"), py::arg("inner"), py::arg("cols"), py::arg("splits"),
      py::arg("num_tiles"), operandDoc);
  m.def(
      "matmul_rhs_mapping",
      [](std::size_t groups, std::size_t rows, std::size_t inner, std::size_t cols,
         const Splits &splits, std::size_t numTiles) {
        return matmulRhsMapping(MatmulShape{groups, rows, inner, cols}, toSplits(splits),
                                numTiles);
      },
      py::arg("groups"), py::arg("rows"), py::arg("inner"), py::arg("cols"), py::arg("splits"),
      py::arg("num_tiles"), operandDoc);
  m.def(
      "matmul_output_mapping",
      [](std::size_t groups, std::size_t rows, std::size_t inner, std::size_t cols,
         const Splits &splits, std::size_t numTiles) {
        return matmulOutputMapping(MatmulShape{groups, rows, inner, cols}, toSplits(splits),
                                   numTiles);
      },
      py::arg("groups"), py::arg("rows"), py::arg("inner"), py::arg("cols"), py::arg("splits"),
      py::arg("num_tiles"), operandDoc);

  m.def("bias_tile_mapping", &biasTileMapping, py::arg("activation"), py::arg("num_elements"),
        py::arg("num_channels"),
        "Put bias element c on the tile holding most of channel c (last axis) of the\n"
        "activation; ties to the lowest tile.");

  m.def("sliceable_table_mapping", &sliceableTableMapping, py::arg("num_rows"),
        py::arg("num_cols"), py::arg("num_tiles"), py::arg("grain_size") = 1,
        "Map a [rows, cols] table sliced along rows: column ranges over tiles (then rows).");

  m.def(
      "sliceable_table_mapping_arrays",
      [](std::size_t numRows, std::size_t numCols, std::size_t numTiles, std::size_t grainSize) {
        return sliceableTableArrays(numRows, numCols, numTiles, grainSize);
      },
      py::arg("num_rows"), py::arg("num_cols"), py::arg("num_tiles"), py::arg("grain_size") = 1,
      "sliceable_table_mapping as arrays (tile_starts[T + 1], intervals[n, 2]), int64.");

  m.def("choose_elementwise_output", &chooseElementwiseOutput, py::arg("inputs"),
        py::arg("num_elements"),
        "Index of the input mapping an elementwise output is cloned from (Poplibs' order).");

  bindTileArrays(m);
}
