// Per-axis sources of fill/sample pairs and the ops rebuilt from them (see the header).
#include "unwind_core/fill_sample.hpp"

#include <utility>

namespace popart_unwind::core {

Op sampleOpAt(const Shape &in, Region where) {
  Shape out = where.nelms();
  return Op{OpType::SettSample, in, std::move(out), {}, std::move(where)};
}

Op fillOpAt(const Shape &in, Region scaffold) {
  Shape out = scaffold.shape();
  return Op{OpType::SettFillInto, in, std::move(out), {}, std::move(scaffold)};
}

Sources sampleFillSources(const Region &sample, const Region &fill) {
  Sources sources;
  sources.reserve(fill.shape().size());
  for (std::size_t d = 0; d < fill.shape().size(); ++d) {
    const std::vector<Index> kept = sample.dims()[d].ons();
    const std::vector<Index> placed = fill.dims()[d].ons();
    std::vector<Index> axis(static_cast<std::size_t>(fill.shape()[d]), kEmptySource);
    for (std::size_t k = 0; k < placed.size(); ++k)
      axis[static_cast<std::size_t>(placed[k])] = kept[k];
    sources.push_back(std::move(axis));
  }
  return sources;
}

Sources fillSampleSources(const Region &fill, const Region &sample) {
  Sources sources;
  sources.reserve(fill.shape().size());
  for (std::size_t d = 0; d < fill.shape().size(); ++d) {
    std::vector<Index> inputAt(static_cast<std::size_t>(fill.shape()[d]), kEmptySource);
    Index rank = 0;
    for (const auto &run : fill.dims()[d].runs())
      for (Index i = run.first; i < run.second; ++i)
        inputAt[static_cast<std::size_t>(i)] = rank++;
    std::vector<Index> axis;
    axis.reserve(static_cast<std::size_t>(sample.dims()[d].count()));
    for (const auto &run : sample.dims()[d].runs())
      for (Index i = run.first; i < run.second; ++i)
        axis.push_back(inputAt[static_cast<std::size_t>(i)]);
    sources.push_back(std::move(axis));
  }
  return sources;
}

namespace {

struct AxisLayout {
  Index size = 0;
  std::vector<Index> inputSlots; // where each input index sits in the scaffold
  std::vector<Index> readSlots;  // the scaffold slot each output index reads
};

// One axis of the scaffold: an empty output takes a fresh slot; a copied input is reached
// by laying out every input up to it, so skipped inputs sit before it.
AxisLayout scaffoldAxis(const std::vector<Index> &sources, Index inSize) {
  AxisLayout layout;
  layout.inputSlots.reserve(static_cast<std::size_t>(inSize));
  layout.readSlots.reserve(sources.size());
  Index nextInput = 0;
  Index slot = 0;
  for (Index source : sources) {
    if (source == kEmptySource) {
      layout.readSlots.push_back(slot++);
      continue;
    }
    for (Index i = nextInput; i <= source; ++i)
      layout.inputSlots.push_back(slot++);
    layout.readSlots.push_back(slot - 1);
    nextInput = source + 1;
  }
  for (Index i = nextInput; i < inSize; ++i)
    layout.inputSlots.push_back(slot++);
  layout.size = slot;
  return layout;
}

} // namespace

std::vector<Op> fillSampleOps(const Shape &in, const Sources &sources) {
  std::vector<AxisLayout> layouts;
  layouts.reserve(in.size());
  Shape scaffoldShape, outShape;
  for (std::size_t d = 0; d < in.size(); ++d) {
    layouts.push_back(scaffoldAxis(sources[d], in[d]));
    scaffoldShape.push_back(layouts.back().size);
    outShape.push_back(static_cast<Index>(sources[d].size()));
  }
  std::vector<Op> ops;
  if (scaffoldShape != in) {
    Dims placed;
    for (const AxisLayout &layout : layouts)
      placed.push_back(DimSet::fromSorted(layout.inputSlots));
    ops.push_back(fillOpAt(in, Region(scaffoldShape, std::move(placed))));
  }
  if (outShape != scaffoldShape) {
    Dims read;
    for (const AxisLayout &layout : layouts)
      read.push_back(DimSet::fromSorted(layout.readSlots));
    ops.push_back(sampleOpAt(scaffoldShape, Region(scaffoldShape, std::move(read))));
  }
  return ops;
}

} // namespace popart_unwind::core
