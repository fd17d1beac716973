// What one tile's share of a matmul costs in compute, as Poplibs' planner estimates it.
//
// Poplibs (graphcore/poplibs) runs a matmul as a 1x1 convolution: the rows of the left operand
// are the field, the inner axis the input channels, the columns the output channels; its
// planner tries the operands swapped first (the columns as the field), and keeps that plan on
// a tie, as it pays no transform costs. On an IPU
// with an accumulating matrix product (AMP) unit it picks the ConvPartial1x1 vertex, whose
// cycle estimate (lib/poplin/PerformanceEstimation.hpp: the 1x1 supervisor inner- and
// outer-loop estimates) has a fixed cost per vertex, per input-channel group and per
// output-channel group beside the core loop's few cycles per field element. Partial sums of a
// split inner axis are added by a reduce vertex (getReduceCycleEstimate there) and a half
// result cast from float partials (estimateCastCycles). This file restates those estimates in
// our own terms, for a Mk2 tile with float partials (PopART's default for matmuls); the
// figures each constant comes from are listed in docs/ipu-model.md. Approximate where said.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tile_params.hpp"

namespace popart_unwind {

// Worker contexts of one tile (six on every IPU so far).
constexpr std::uint64_t kWorkers = 6;
// Bytes of weights one load instruction brings into the AMP units per cycle (128-bit loads).
constexpr std::uint64_t kCoeffLoadBytesPerCycle = 16;

// How the AMP vertex groups channels for one element type. Half: 16 conv units, each taking
// 16 input channels. Float: 8 conv units of 16 input channels. Poplar's target constants are
// not public: these are chosen so that the core loop (4 worker cycles per field element in
// half, 8 in float, from Poplibs' estimate) reaches the published peak of 64 and 16
// multiply-accumulates per tile per cycle. `coreCycles` scales with the IPU Model's
// macs-per-cycle figure, so halving that figure halves the core loop's rate.
struct AmpShape {
  std::uint64_t inChans;
  std::uint64_t outChans;
  std::uint64_t coreCycles;
  std::uint64_t weightLoadCycles;
  bool halfActivations;
};

inline AmpShape ampShape(const TileParams &params) {
  const bool half = params.elementBytes <= 2;
  const std::uint64_t inChans = 16;
  const std::uint64_t outChans = half ? 16 : 8;
  const std::uint64_t core = std::max<std::uint64_t>(1, ceilDiv(inChans * outChans,
                                                                params.macsPerCycle));
  const std::uint64_t load = outChans * inChans * params.elementBytes / kCoeffLoadBytesPerCycle;
  return {inChans, outChans, core, load, half};
}

// One worker's cycles over `elements` field elements (the inner loop of the 1x1 vertex),
// with the output zeroed first or accumulated into.
inline std::uint64_t ampWorkerCycles(const AmpShape &amp, std::uint64_t elements, bool zeroing) {
  std::uint64_t cycles = 0;
  if (amp.halfActivations) {
    // Half activations with float partials share one code path in Poplibs' estimate.
    const std::uint64_t tail = zeroing ? 1 : 2;
    switch (elements) {
    case 0: cycles = 20 + tail; break;
    case 1: cycles = 31 + tail; break;
    case 2: cycles = 40 + tail; break;
    default: cycles = (zeroing ? 37 : 38) + (elements - 3) * amp.coreCycles;
    }
    // State retained between calls saves a worker 7 cycles.
    return elements ? cycles - 7 : cycles;
  }
  const std::uint64_t zero = zeroing ? 1 : 0;
  const std::uint64_t zeroPerElement = 4;
  switch (elements) {
  case 0: return 24;
  case 1: return 47 + (2 + zeroPerElement) * zero;
  case 2: return 46 + (2 + 2 * zeroPerElement) * zero;
  default:
    return 46 + (2 + zeroPerElement * elements) * zero + (elements - 3) * amp.coreCycles;
  }
}

// The inner loop in tile cycles: the field split over the six workers (one work item each),
// the slowest worker's cycles times six (workers take turns), and at least 14 cycles more
// than the quickest when all six are busy.
inline std::uint64_t ampInnerLoopCycles(const AmpShape &amp, std::uint64_t field, bool zeroing) {
  const std::uint64_t most = ceilDiv(field, kWorkers);
  const std::uint64_t least = field / kWorkers;
  const std::uint64_t slowest = kWorkers * ampWorkerCycles(amp, most, zeroing);
  const std::uint64_t quickest =
      field < kWorkers ? 0 : kWorkers * ampWorkerCycles(amp, least, zeroing);
  return std::max(slowest, quickest + 14);
}

// One AMP vertex over a tile's block: `groups` independent matmuls of a [field, in] by
// [in, out] block each (the supervisor's loops over groups, input- and output-channel groups,
// with the weight loads of each pass).
inline std::uint64_t ampVertexCycles(const AmpShape &amp, std::uint64_t groups,
                                     std::uint64_t field, std::uint64_t in, std::uint64_t out) {
  const std::uint64_t inGroups = ceilDiv(in, amp.inChans);
  const std::uint64_t outGroups = ceilDiv(out, amp.outChans);
  const std::uint64_t withZeroing = ampInnerLoopCycles(amp, field, true);
  const std::uint64_t accumulating = ampInnerLoopCycles(amp, field, false);
  const std::uint64_t retention = amp.halfActivations ? kWorkers * (7 + 3 * (inGroups * groups - 1))
                                                      : 0;
  const std::uint64_t firstInGroup = 11 + outGroups * (18 + 7 + amp.weightLoadCycles + withZeroing);
  const std::uint64_t laterInGroup =
      15 + outGroups * (19 + 6 + amp.weightLoadCycles + accumulating);
  return 50 + retention + groups * (13 + (inGroups - 1) * laterInGroup + firstInGroup);
}

// A block run with its operands swapped, as Poplibs' planner prefers for a matmul
// (lib/poplin/ConvPlan.cpp tries swapOperands first for matmuls and fully connected passes):
// the columns are the field, the rows the output channels. The unswapped plan would need
// transforms (on-tile regrouping of the left operand) this model does not estimate; taking
// the cheaper of the two without them made the measured matmuls of four columns 24-72 %
// quicker than measured at the Bow clock (benchmarks/ipu_measured.py); the swapped plan alone
// is within 24 %.
inline std::uint64_t ampMatmulCycles(const TileParams &params, std::uint64_t groups,
                                     std::uint64_t rows, std::uint64_t inner,
                                     std::uint64_t cols) {
  return ampVertexCycles(ampShape(params), groups, cols, inner, rows);
}

// A reduce vertex adding `depth` float partials into each of `outputs` elements (Poplibs'
// supervisor reduce estimate, single stage, partials on a 64-bit data path).
inline std::uint64_t reduceVertexCycles(std::uint64_t outputs, std::uint64_t depth,
                                        bool floatOutput) {
  const std::uint64_t vector = 4;                // float partials accumulated four at a time
  const std::uint64_t cyclesPerLoop = 4 / 2 + 1; // two partials loaded per cycle, and a pointer
  std::uint64_t loops = outputs / vector + ((outputs & 1) ? 1 : 0) + ((outputs & 2) ? 1 : 0);
  std::uint64_t perWorker = loops / kWorkers;
  std::uint64_t cycles = 32;
  if (loops % kWorkers) {
    if (outputs & (vector - 1)) {
      cycles += 2 * depth + 13;
    } else {
      ++perWorker;
    }
  }
  cycles += (cyclesPerLoop * depth + (floatOutput ? 7 : 6)) * perWorker;
  return cycles * kWorkers;
}

// Casting `outputs` float partials to a half result (Poplibs' cast estimate: four halves or two
// floats per vector, split over the workers, with a fixed 26 cycles each).
inline std::uint64_t castVertexCycles(std::uint64_t outputs) {
  const std::uint64_t perWorker = ceilDiv(outputs, kWorkers);
  return (std::max(ceilDiv(perWorker, 2), ceilDiv(perWorker, 4)) + 26) * kWorkers;
}

} // namespace popart_unwind
