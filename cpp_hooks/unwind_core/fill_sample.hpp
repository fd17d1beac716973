// The canonical form of a neighbouring SettFillInto and SettSample, in either order.
//
// Port of popart_unwind.memory.fill_sample. Such a pair acts on each axis on its own:
// every output index copies one input index (increasing) or is empty. That per-axis
// source list is the pair's whole meaning, so rebuilding the ops from it gives a single
// form for all pairs that mean the same: a fill into a scaffold lining up the empty slots
// and the inputs, then a sample of the slots the output reads (either may be absent).
#pragma once

#include <vector>

#include "unwind_core/chain.hpp"

namespace popart_unwind::core {

// Per axis, for each output index, the input index it copies or kEmptySource.
using Sources = std::vector<std::vector<Index>>;
constexpr Index kEmptySource = -1;

// Sources of SettSample(sample) -> SettFillInto(fill).
Sources sampleFillSources(const Region &sample, const Region &fill);
// Sources of SettFillInto(fill) -> SettSample(sample).
Sources fillSampleSources(const Region &fill, const Region &sample);
// The canonical ops (at most a fill then a sample) with the meaning `sources`.
std::vector<Op> fillSampleOps(const Shape &in, const Sources &sources);

// Ops built like the Python make_op: input shape given, output from the region.
Op sampleOpAt(const Shape &in, Region where);
Op fillOpAt(const Shape &in, Region scaffold);

} // namespace popart_unwind::core
