// Python face of the unwinding solver's C++ core: submodule popart_unwind._hooks.unwind_core.
//
// Regions cross as plain values (a shape, per dimension a list of [first, last) runs, and an
// empty flag) so that tests can hold every operation against popart_unwind.memory.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "unwind_core/greedy.hpp"
#include "unwind_core/score.hpp"
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


// A chain op from its Python description: (type name, input shape, attribute), the
// attribute a shape (Reshape, Expand, Reduce), axes (DimShuffle, Reverse) or a region
// value (SettSample, SettFillInto).
core::Op toOp(const py::tuple &desc) {
  const core::OpType type = core::opTypeFromName(desc[0].cast<std::string>());
  const auto in = desc[1].cast<Shape>();
  switch (type) {
  case core::OpType::DimShuffle:
    return core::dimShuffleOp(in, desc[2].cast<std::vector<int>>());
  case core::OpType::Reverse:
    return core::reverseOp(in, desc[2].cast<std::vector<int>>());
  case core::OpType::SettSample:
  case core::OpType::SettFillInto: {
    const auto value = desc[2].cast<py::tuple>();
    const Region region =
        toRegion(value[0].cast<Shape>(), value[1].cast<RunsList>(), value[2].cast<bool>());
    return type == core::OpType::SettSample ? core::sampleOp(region) : core::fillOp(region);
  }
  default:
    return core::shapeOp(type, in, desc[2].cast<Shape>());
  }
}

core::Chain toChain(const Shape &in, const py::list &ops) {
  core::Chain chain(in);
  for (const auto &op : ops)
    chain.append(toOp(op.cast<py::tuple>()));
  return chain;
}

py::tuple fromOp(const core::Op &op) {
  py::object attr;
  switch (op.type) {
  case core::OpType::DimShuffle:
  case core::OpType::Reverse:
    attr = py::cast(op.axes);
    break;
  case core::OpType::SettSample:
  case core::OpType::SettFillInto:
    attr = fromRegion(op.region);
    break;
  default:
    attr = py::cast(op.out);
  }
  return py::make_tuple(core::opTypeName(op.type), op.in, attr);
}

py::tuple fromChain(const core::Chain &chain) {
  py::list ops;
  for (const core::Op &op : chain.ops())
    ops.append(fromOp(op));
  return py::make_tuple(chain.inShape(), ops);
}

void addTensor(core::Graph &graph, const std::string &kind, const Shape &shape,
               const std::vector<int> &inputs, const py::object &chain, int axis,
               const std::vector<int> &unwindIndices) {
  core::Tensor tensor{core::kindFromName(kind), shape, inputs, core::Chain(), axis,
                      unwindIndices};
  if (!chain.is_none()) {
    const auto value = chain.cast<py::tuple>();
    tensor.chain = toChain(value[0].cast<Shape>(), value[1].cast<py::list>());
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
      out.append(py::make_tuple(path.src, path.dst, fromChain(path.chain),
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
      .def("intersect", py::overload_cast<const Regions &>(&Regions::intersect, py::const_))
      .def("subtract", &Regions::subtract)
      .def("sett_sample", &Regions::sample)
      .def("sett_fill_into", &Regions::fillInto)
      .def("reshape", &Regions::reshape)
      .def("dim_shuffle", &Regions::dimShuffle)
      .def("reverse", &Regions::reverse)
      .def("expand", &Regions::expand)
      .def("reduce", &Regions::reduce);

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
      .def("paths", &NativeRun::paths, "The sink paths as (src, dst, chain, regions).")
      .def("__len__", [](const NativeRun &run) { return run.result.sinkPaths.size(); })
      .def_property_readonly("blockers", [](const NativeRun &run) { return run.result.blockers; })
      .def_property_readonly("late_sinks",
                             [](const NativeRun &run) { return run.result.lateSinks; })
      .def("symbolic_score", &NativeRun::symbolicScore)
      .def("check", &NativeRun::check, "ValueError when the layouts depend on themselves.");
  m.def("greedy_run", &runGreedy, py::arg("analysis"), py::arg("deferred"), py::arg("late"),
        py::keep_alive<0, 1>(), "One greedy run with deferred pairs and late sinks.");
  m.def(
      "canonicalized",
      [](const Shape &in, const py::list &ops) { return fromChain(toChain(in, ops).canonicalized()); },
      "A chain (input shape, op descriptions) in canonical form.");
  m.def(
      "apply_chain",
      [](const Shape &in, const py::list &ops, const Regions &regions) {
        return toChain(in, ops).apply(regions);
      },
      "The regions a chain's output gets from the given input regions.");
}


} // namespace popart_unwind
