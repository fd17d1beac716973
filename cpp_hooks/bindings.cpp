// Python bindings of the C++ layout hooks: module popart_unwind._hooks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "linear_mapping.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_hooks, m) {
  m.doc() = "C++ layout hooks of the IPU Model target (tile mappings in Poplar's format).";
  m.def("linear_tile_mapping", &popart_unwind::linearTileMapping, py::arg("num_elements"),
        py::arg("num_tiles"), py::arg("grain_size") = 1, py::arg("min_elements_per_tile") = 0,
        "Spread a flattened tensor linearly over tiles (Poplibs' calcLinearTileMapping rule).\n"
        "Returns one list per tile of half-open (begin, end) element intervals.");
}
