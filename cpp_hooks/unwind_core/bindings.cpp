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
#include "unwind_core/greedy.hpp"
#include "unwind_core/region.hpp"
#include "unwind_core/score.hpp"

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


void addTensor(core::Graph &graph, const std::string &kind, const Shape &shape,
               const std::vector<int> &inputs, const py::object &chain, int axis,
               const std::vector<int> &unwindIndices) {
  core::Tensor tensor{core::kindFromName(kind), shape, inputs, core::Chain(), axis,
                      unwindIndices};
  if (!chain.is_none()) {
    const auto value = chain.cast<py::tuple>();
    tensor.chain = toChain(value[0].cast<Shape>(),
                           value[1].cast<std::vector<std::tuple<std::string, Shape, py::object>>>());
  }
  graph.add(std::move(tensor));
}

// The result of one greedy run, kept in C++: the sink paths become Python objects only
// when asked for, and the score is computed here.
struct NativeRun {
  const core::Graph *graph;
  core::RunResult result;

  py::list paths() const {
    py::list out;
    for (const core::Path &path : result.sinkPaths)
      out.append(py::make_tuple(path.src, path.dst,
                                py::make_tuple(path.chain.inShape(), opsValue(path.chain)),
                                fromRegions(path.regions)));
    return out;
  }

  double symbolicScore() const {
    py::gil_scoped_release released;
    return core::symbolicScore(*graph, core::inwardPaths(*graph, result.sinkPaths));
  }

  void check() const {
    try {
      core::dependencyOrder(*graph, result.sinkPaths);
    } catch (const std::domain_error &error) {
      throw py::value_error(error.what());
    }
  }
};

NativeRun runGreedy(const core::Analysis &analysis, const std::set<int> &deferred,
                    const std::set<int> &late) {
  NativeRun run{&analysis.graph, {}};
  py::gil_scoped_release released;
  run.result = core::greedyRun(analysis, deferred, late);
  return run;
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
      .def("intersect", &Regions::intersect)
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

  py::class_<core::Graph>(m, "Graph")
      .def(py::init<>())
      .def("add", &addTensor, py::arg("kind"), py::arg("shape"), py::arg("inputs"),
           py::arg("chain"), py::arg("axis"), py::arg("unwind_indices"))
      .def("add_pair", &core::Graph::addPair)
      .def("__len__", &core::Graph::size);
  py::class_<core::Analysis>(m, "Analysis")
      .def(py::init([](const core::Graph &graph) {
             py::gil_scoped_release released;
             return new core::Analysis(graph);
           }),
           py::keep_alive<1, 2>());
  py::class_<NativeRun>(m, "NativeRun")
      .def("paths", &NativeRun::paths,
           "The sink paths as (src, dst, (input shape, ops), regions), each op as Chain.ops "
           "gives it.")
      .def("__len__", [](const NativeRun &run) { return run.result.sinkPaths.size(); })
      .def_property_readonly("blockers", [](const NativeRun &run) { return run.result.blockers; })
      .def_property_readonly("late_sinks",
                             [](const NativeRun &run) { return run.result.lateSinks; })
      .def("symbolic_score", &NativeRun::symbolicScore)
      .def("check", &NativeRun::check, "ValueError when the layouts depend on themselves.");
  m.def("greedy_run", &runGreedy, py::arg("analysis"), py::arg("deferred"), py::arg("late"),
        py::keep_alive<0, 1>(), "One greedy run with deferred pairs and late sinks.");
}


} // namespace popart_unwind
