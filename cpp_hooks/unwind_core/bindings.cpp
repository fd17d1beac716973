// Python face of the unwinding solver's C++ core: submodule popart_unwind._hooks.unwind_core.
//
// Regions cross as plain values (a shape, per dimension a list of [first, last) runs, and an
// empty flag) so that tests can hold every operation against popart_unwind.memory.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "unwind_core/region.hpp"

namespace py = pybind11;

namespace popart_unwind {

namespace {

using core::DimSet;
using core::Region;
using core::Regions;
using core::Shape;

using RunsList = std::vector<std::vector<DimSet::Run>>;

DimSet toDimSet(const std::vector<DimSet::Run> &runs) { return DimSet::fromRuns(runs); }

Region toRegion(const Shape &shape, const RunsList &dims, bool empty) {
  core::Dims out;
  for (const auto &runs : dims)
    out.push_back(toDimSet(runs));
  return Region(shape, std::move(out), empty);
}

py::tuple fromRegion(const Region &r) {
  RunsList dims;
  for (const DimSet &d : r.dims())
    dims.push_back(d.runs());
  return py::make_tuple(r.shape(), dims, r.empty());
}

py::tuple fromRegions(const Regions &rs) {
  py::list members;
  for (const Region &r : rs.members())
    members.append(fromRegion(r));
  return py::make_tuple(rs.shape(), members);
}

} // namespace

void bindUnwindCore(py::module_ &parent) {
  py::module_ m = parent.def_submodule(
      "unwind_core", "The unwinding solver's C++ core (regions, chains, Greedy0).");
  py::class_<Region>(m, "Region")
      .def(py::init(&toRegion), py::arg("shape"), py::arg("dims"), py::arg("empty") = false)
      .def("value", &fromRegion)
      .def("total_elms", &Region::totalElms)
      .def("sett_sample", &Region::sample)
      .def("sett_fill_into", &Region::fillInto)
      .def("dim_shuffle", &Region::dimShuffle)
      .def("reverse", &Region::reverse)
      .def("resized", &Region::resized);
  py::class_<Regions>(m, "Regions")
      .def(py::init<Shape, const std::vector<Region> &>())
      .def("value", &fromRegions)
      .def("total_elms", &Regions::totalElms)
      .def("intersect", py::overload_cast<const Regions &>(&Regions::intersect, py::const_))
      .def("subtract", &Regions::subtract)
      .def("sett_sample", &Regions::sample)
      .def("sett_fill_into", &Regions::fillInto)
      .def("reshape", &Regions::reshape)
      .def("dim_shuffle", &Regions::dimShuffle)
      .def("reverse", &Regions::reverse)
      .def("expand", &Regions::expand)
      .def("reduce", &Regions::reduce);
}

} // namespace popart_unwind
