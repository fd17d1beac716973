// Python bindings of the C++ layout hooks: module popart_unwind._hooks.
//
// Every hook takes one TileParams (the IPU's figures for one element type, built by
// popart_unwind.machine.IpuModel). The fill hooks write each element's tile into a flat int16
// or int32 numpy array the caller made (the planner's tile dtype), never a converted copy: a
// dtype mismatch is a TypeError; plan_matmul returns the matmul's splits. Bad arguments raise ValueError; the Python face
// (popart_unwind.machine.hooks) turns these into TargetError. counting_bindings.cpp adds the
// counting kernels the cost model runs over such arrays, and the runs of Poplar's format.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "linear_mapping.hpp"
#include "matmul_mapping.hpp"
#include "sliceable_mapping.hpp"
#include "tile_params.hpp"

namespace py = pybind11;

namespace popart_unwind {
// counting_bindings.cpp: tile counts, the matmul readers' counts and each tile's runs.
void bindCounting(py::module_ &m);
// transpose_bindings.cpp: a grouped matrix of tile ids with its last two axes swapped.
void bindTranspose(py::module_ &m);
// unwind_core/bindings.cpp: the unwinding solver's C++ core.
void bindUnwindCore(py::module_ &m);
} // namespace popart_unwind

using namespace popart_unwind;

namespace {

template <typename T> using Tiles = py::array_t<T, py::array::c_style>;

template <typename T>
T *writable(Tiles<T> &out, std::size_t numElements, const TileParams &params) {
  if (out.ndim() != 1 || static_cast<std::size_t>(out.shape(0)) != numElements) {
    throw std::invalid_argument("the output array must be flat with " +
                                std::to_string(numElements) + " elements");
  }
  if (params.numTiles - 1 > static_cast<std::size_t>(std::numeric_limits<T>::max())) {
    throw std::invalid_argument("the output array's integer type cannot hold the ids of " +
                                std::to_string(params.numTiles) + " tiles");
  }
  return out.mutable_data();
}

// Returns how many tiles the mapping uses (PopART's linear mapper advances by that much).
template <typename T>
std::size_t fillLinear(Tiles<T> out, const TileParams &params, std::size_t startTile) {
  if (startTile >= params.numTiles) {
    throw std::invalid_argument("linear tile mapping: start tile " + std::to_string(startTile) +
                                " is not below the tile count " +
                                std::to_string(params.numTiles));
  }
  const auto numElements = static_cast<std::size_t>(out.size());
  const LinearLayout layout = linearLayout(numElements, params);
  return fillLinearTiles(layout, params, startTile, writable(out, numElements, params));
}

template <typename T>
void fillMatmul(Tiles<T> out, const TileParams &params, const std::array<std::size_t, 4> &dims,
                const std::array<std::size_t, 4> &splits, const std::string &operand) {
  params.check();
  const MatmulShape shape{dims[0], dims[1], dims[2], dims[3]};
  T *tiles = writable(out, matmulElements(shape, operand), params);
  forEachMatmulRun(shape, MatmulSplits{splits[0], splits[1], splits[2], splits[3]}, operand,
                   params.numTiles, [tiles](std::size_t begin, std::size_t end, std::size_t tile) {
                     std::fill(tiles + begin, tiles + end, static_cast<T>(tile));
                   });
}

template <typename T>
void fillSliceable(Tiles<T> out, const TileParams &params, std::size_t numRows,
                   std::size_t numCols) {
  const SliceableLayout layout = sliceableLayout(numRows, numCols, params);
  fillSliceableTiles(layout, writable(out, numRows * numCols, params));
}

template <typename T> void bindFills(py::module_ &m) {
  m.def("fill_linear_tiles", &fillLinear<T>, py::arg("out").noconvert(), py::arg("params"),
        py::arg("start_tile"),
        "Write each element's tile of a linear mapping rotated to start at start_tile into\n"
        "out; return the number of tiles it uses.");
  m.def("fill_matmul_tiles", &fillMatmul<T>, py::arg("out").noconvert(), py::arg("params"),
        py::arg("dims"), py::arg("splits"), py::arg("operand"),
        "Write each element's tile of a matmul tensor (lhs, rhs, output) into out.");
  m.def("fill_sliceable_tiles", &fillSliceable<T>, py::arg("out").noconvert(),
        py::arg("params"), py::arg("num_rows"), py::arg("num_cols"),
        "Write each element's tile of a sliceable table into out.");
}

TileParams makeParams(std::size_t numTiles, std::size_t elementBytes, std::size_t grainElements,
                      std::size_t minElementsPerTile, std::size_t partialBytesPerElement,
                      std::size_t exchangeBytesPerCycle, std::size_t macsPerCycle,
                      std::size_t syncCycles, bool vertexCosts,
                      std::optional<std::size_t> tempBytesLimit,
                      std::size_t tilesPerExchangeBus) {
  const TileParams params{numTiles,         elementBytes,          grainElements,
                          minElementsPerTile, partialBytesPerElement, exchangeBytesPerCycle,
                          macsPerCycle,     syncCycles,            vertexCosts,
                          tempBytesLimit.value_or(static_cast<std::size_t>(-1)),
                          tilesPerExchangeBus};
  params.check();
  return params;
}

} // namespace

PYBIND11_MODULE(_hooks, m) {
  m.doc() = "C++ layout hooks of the IPU Model (each element's tile, as flat arrays).";

  py::class_<TileParams>(m, "TileParams",
                         "An IPU's figures for one element type: what every hook needs.")
      .def(py::init(&makeParams), py::kw_only(), py::arg("num_tiles"), py::arg("element_bytes"),
           py::arg("grain_elements"), py::arg("min_elements_per_tile"),
           py::arg("partial_bytes_per_element"), py::arg("exchange_bytes_per_cycle"),
           py::arg("macs_per_cycle"), py::arg("sync_cycles"), py::arg("vertex_costs") = true,
           py::arg("temp_bytes_limit") = py::none(), py::arg("tiles_per_exchange_bus") = 1)
      .def_readonly("num_tiles", &TileParams::numTiles)
      .def_readonly("element_bytes", &TileParams::elementBytes)
      .def_readonly("grain_elements", &TileParams::grainElements)
      .def_readonly("min_elements_per_tile", &TileParams::minElementsPerTile)
      .def_readonly("partial_bytes_per_element", &TileParams::partialBytesPerElement)
      .def_readonly("exchange_bytes_per_cycle", &TileParams::exchangeBytesPerCycle)
      .def_readonly("macs_per_cycle", &TileParams::macsPerCycle)
      .def_readonly("sync_cycles", &TileParams::syncCycles)
      .def_readonly("vertex_costs", &TileParams::vertexCosts)
      .def_readonly("temp_bytes_limit", &TileParams::tempBytesLimit)
      .def_readonly("tiles_per_exchange_bus", &TileParams::tilesPerExchangeBus);

  m.def(
      "plan_matmul",
      [](const TileParams &params, const std::array<std::size_t, 4> &dims) {
        const MatmulSplits s = planMatmul(MatmulShape{dims[0], dims[1], dims[2], dims[3]}, params);
        return std::make_tuple(s.groups, s.rows, s.inner, s.cols);
      },
      py::arg("params"), py::arg("dims"),
      "The splits (gG, gM, gK, gN) of [G,M,K]x[G,K,N] (dims) with the fewest estimated\n"
      "cycles on params.num_tiles tiles.");
  m.def(
      "matmul_candidates",
      [](const TileParams &params, const std::array<std::size_t, 4> &cube,
         const std::vector<PassAxes> &passes, std::size_t count) {
        std::vector<std::tuple<std::size_t, std::size_t, std::size_t, std::size_t>> result;
        for (const auto &s :
             matmulCandidates(MatmulShape{cube[0], cube[1], cube[2], cube[3]}, passes, count,
                              params)) {
          result.emplace_back(s.groups, s.rows, s.inner, s.cols);
        }
        return result;
      },
      py::arg("params"), py::arg("cube"), py::arg("passes"), py::arg("count"),
      "The count partitions (gG, gM, gK, gN) of the cube [G,M,K,N] with the fewest cycles\n"
      "summed over passes (each the cube axes of its rows, inner axis and columns), best\n"
      "first.");
  m.def(
      "matmul_cost",
      [](const TileParams &params, const std::array<std::size_t, 4> &dims,
         const std::array<std::size_t, 4> &splits, const std::string &shared) {
        const MatmulShape shape{dims[0], dims[1], dims[2], dims[3]};
        const MatmulSplits s{splits[0], splits[1], splits[2], splits[3]};
        params.check();
        checkMatmulSplits(shape, s, params.numTiles);
        SharedOperand operand = SharedOperand::None;
        if (shared == "lhs") {
          operand = SharedOperand::Lhs;
        } else if (shared == "rhs") {
          operand = SharedOperand::Rhs;
        } else if (shared != "none") {
          throw std::invalid_argument("shared operand must be lhs, rhs or none, not " + shared);
        }
        const MatmulCost c = partitionCost(shape, s, params, operand);
        return std::make_tuple(c.compute, c.exchange, c.reduction, c.tempBytes, c.serial);
      },
      py::arg("params"), py::arg("dims"), py::arg("splits"), py::arg("shared"),
      "(compute, exchange, reduction, temporary bytes, serial steps) of the partition splits\n"
      "of [G,M,K]x[G,K,N] (dims): cycles of the busiest tile, and bytes on it; shared: the\n"
      "operand that is its cube's RHS, read over shared exchange buses (lhs, rhs, none).");

  bindFills<std::int16_t>(m);
  bindFills<std::int32_t>(m);
  bindCounting(m);
  bindTranspose(m);
  bindUnwindCore(m);
}
