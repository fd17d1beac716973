// A grouped matrix of tile ids with its last two axes swapped (part of module
// popart_unwind._hooks): [G, R, C] -> [G, C, R]. numpy's strided copy walks the source or
// the destination a whole row apart for every element, so at real sizes (an embedding
// table of 38.6 M ids) nearly every element misses the cache. This copy takes the source
// in bands of kBandCols columns, and each band in steps of kStepRows rows: a step reads
// kStepRows short sequential pieces and gives each of the band's kBandCols destination
// rows kStepRows consecutive ids, so the destination lines being filled (kBandCols of
// them) stay in the cache until they are full, and the source is read in sequential
// sweeps. The sizes were chosen by timing [768, 50257] and [50257, 768] 16- and 32-bit
// arrays (2.5 to 3 times numpy's copy; docs/ipu-model.md).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace py = pybind11;

namespace popart_unwind {
namespace {

template <typename T> using Ids = py::array_t<T, py::array::c_style>;

// Source columns per band (destination rows filled together) and source rows per step.
constexpr std::size_t kBandCols = 512;
constexpr std::size_t kStepRows = 8;

template <typename T>
void transposeTiles(const Ids<T> &source, Ids<T> out, std::size_t groups, std::size_t rows,
                    std::size_t cols) {
  const std::size_t plane = rows * cols;
  if ((rows && cols > static_cast<std::size_t>(-1) / rows) ||
      (plane && groups > static_cast<std::size_t>(-1) / plane) ||
      static_cast<std::size_t>(source.size()) != groups * plane ||
      static_cast<std::size_t>(out.size()) != groups * plane) {
    throw std::invalid_argument("the source and the output must both hold groups * rows * "
                                "cols ids");
  }
  const T *in = source.data();
  T *to = out.mutable_data();
  if (in == to && plane) {
    throw std::invalid_argument("the output must not be the source");
  }
  for (std::size_t g = 0; g < groups; ++g) {
    const T *from = in + g * plane;
    T *into = to + g * plane;
    for (std::size_t c0 = 0; c0 < cols; c0 += kBandCols) {
      const std::size_t c1 = std::min(cols, c0 + kBandCols);
      for (std::size_t r0 = 0; r0 < rows; r0 += kStepRows) {
        const std::size_t r1 = std::min(rows, r0 + kStepRows);
        for (std::size_t c = c0; c < c1; ++c) {
          T *column = into + c * rows;
          for (std::size_t r = r0; r < r1; ++r) {
            column[r] = from[r * cols + c];
          }
        }
      }
    }
  }
}

template <typename T> void bindFor(py::module_ &m) {
  m.def("transpose_tiles", &transposeTiles<T>, py::arg("source").noconvert(),
        py::arg("out").noconvert(), py::arg("groups"), py::arg("rows"), py::arg("cols"),
        "Write the [groups, rows, cols] ids of source into out as [groups, cols, rows].");
}

} // namespace

void bindTranspose(py::module_ &m) {
  bindFor<std::int16_t>(m);
  bindFor<std::int32_t>(m);
}

} // namespace popart_unwind
