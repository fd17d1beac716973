// Python face of the unwinding solver's C++ core: submodule popart_unwind._hooks.unwind_core.
//
// Regions cross as plain values (a shape, per dimension a list of [first, last) runs, and an
// empty flag) and chains as (input shape, [(op type, input shape, attribute)]) with the
// attribute a shape, an axes tuple or a region value, so that tests can hold every operation
// against popart_unwind.memory.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <tuple>

#include "unwind_core/canonical.hpp"
#include "unwind_core/chain.hpp"
#include "unwind_core/region.hpp"

namespace py = pybind11;

namespace popart_unwind {

namespace {

using core::Chain;
using core::DimSet;
using core::Op;
using core::OpType;
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

using RegionValue = std::tuple<Shape, RunsList, bool>;

Op toOp(const std::string &name, const Shape &in, const py::object &attr) {
  const OpType type = core::opTypeFromName(name);
  switch (type) {
  case OpType::DimShuffle:
    return core::dimShuffleOp(in, attr.cast<std::vector<int>>());
  case OpType::Reverse:
    return core::reverseOp(in, attr.cast<std::vector<int>>());
  case OpType::SettSample:
  case OpType::SettFillInto: {
    const auto [shape, dims, empty] = attr.cast<RegionValue>();
    const Region region = toRegion(shape, dims, empty);
    const Op op = type == OpType::SettSample ? core::sampleOp(region) : core::fillOp(region);
    if (op.in != in)
      throw std::invalid_argument(name + ": the region does not match the input shape");
    return op;
  }
  default:
    return core::shapeOp(type, in, attr.cast<Shape>());
  }
}

Chain toChain(const Shape &in, const std::vector<std::tuple<std::string, Shape, py::object>> &ops) {
  Chain chain(in);
  for (const auto &[name, opIn, attr] : ops) {
    if (opIn != chain.outShape())
      throw std::invalid_argument(name + " does not start at the chain's output shape");
    chain.append(toOp(name, opIn, attr));
  }
  return chain;
}

// Each op as (type, input shape, output shape, attribute).
py::list opsValue(const Chain &chain) {
  py::list out;
  for (const Op &op : chain.ops()) {
    py::object attr;
    if (op.type == OpType::DimShuffle || op.type == OpType::Reverse)
      attr = py::cast(op.axes);
    else if (op.type == OpType::SettSample || op.type == OpType::SettFillInto)
      attr = fromRegion(op.region);
    else
      attr = py::cast(op.out);
    out.append(py::make_tuple(core::opTypeName(op.type), op.in, op.out, attr));
  }
  return out;
}

Chain canonicalize(const Chain &chain, std::optional<long> maxRewrites) {
  return Chain(chain.inShape(), core::canonicalOps(chain.inShape(), chain.ops(), maxRewrites));
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
  py::class_<Chain>(m, "Chain")
      .def(py::init(&toChain), py::arg("in_shape"), py::arg("ops"))
      .def("ops", &opsValue)
      .def("canonicalized", &Chain::canonicalized)
      .def("apply", py::overload_cast<const Regions &>(&Chain::apply, py::const_))
      .def("unwound", &core::unwindChain);
  m.def("canonicalize", &canonicalize, py::arg("chain"), py::arg("max_rewrites") = py::none(),
        "Canonical form without the memo; max_rewrites overrides the rewrite cap.");
  m.def("clear_canonical_memo", &core::clearCanonicalMemo);
  py::register_exception<core::CanonicalizationError>(m, "CanonicalizationError");
}

} // namespace popart_unwind
