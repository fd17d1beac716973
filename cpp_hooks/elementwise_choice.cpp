#include "elementwise_choice.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>

namespace popart_unwind {
namespace {

struct Balance {
  std::size_t maxElements = 0;
  std::size_t tilesOccupied = 0;
  std::size_t regions = 0;
};

Balance balanceOf(const TileMapping &mapping) {
  Balance balance;
  std::vector<Interval> sorted;
  for (const auto &intervals : mapping) {
    std::size_t elements = 0;
    sorted.clear();
    for (const auto &interval : intervals) {
      if (interval.first < interval.second) {
        sorted.push_back(interval);
        elements += interval.second - interval.first;
      }
    }
    if (elements == 0) {
      continue;
    }
    std::sort(sorted.begin(), sorted.end());
    std::size_t regions = 1;
    for (std::size_t i = 1; i < sorted.size(); ++i) {
      regions += sorted[i].first != sorted[i - 1].second;
    }
    balance.maxElements = std::max(balance.maxElements, elements);
    balance.tilesOccupied += 1;
    balance.regions += regions;
  }
  return balance;
}

} // namespace

std::size_t chooseElementwiseOutput(const std::vector<TileMapping> &inputs,
                                    std::size_t numElements) {
  if (inputs.empty()) {
    throw std::invalid_argument("elementwise output choice needs at least one input mapping");
  }
  std::size_t best = 0;
  Balance bestBalance;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    checkTileMapping(inputs[i], numElements,
                     "elementwise output choice: input " + std::to_string(i));
    const Balance balance = balanceOf(inputs[i]);
    // Smaller maximum first; then more tiles occupied; then fewer regions; else keep the
    // earlier input.
    const auto key = std::make_tuple(balance.maxElements, bestBalance.tilesOccupied,
                                     balance.regions);
    const auto bestKey = std::make_tuple(bestBalance.maxElements, balance.tilesOccupied,
                                         bestBalance.regions);
    if (i == 0 || key < bestKey) {
      best = i;
      bestBalance = balance;
    }
  }
  return best;
}

} // namespace popart_unwind
