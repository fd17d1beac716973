// Swaps that move a later op in front of an earlier one, towards the canonical order.
//
// Port of popart_unwind.memory.canonical_swaps: for a neighbouring pair first -> second
// whose second type comes earlier in OpType, swapPair gives second' -> first' with the
// same meaning, or nullopt when no exact rewrite exists (e.g. a transpose that splits a
// group of a reshape). All 21 out-of-order pairs have a rule.
#pragma once

#include <optional>
#include <vector>

#include "unwind_core/chain.hpp"

namespace popart_unwind::core {

// One independent part of a reshape: input axes and output axes of equal product.
struct ReshapeGroup {
  std::vector<int> ins;
  std::vector<int> outs;
};

// The smallest independent groups of a reshape; size-1 axes form their own groups where
// they line up. nullopt for tensors without elements.
std::optional<std::vector<ReshapeGroup>> reshapeGroups(const Shape &in, const Shape &out);

std::optional<std::vector<Op>> swapPair(const Op &first, const Op &second);

} // namespace popart_unwind::core
