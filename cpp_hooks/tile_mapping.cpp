#include "tile_mapping.hpp"

#include <algorithm>
#include <stdexcept>

namespace popart_unwind {

void checkTileMapping(const TileMapping &mapping, std::size_t numElements,
                      const std::string &what) {
  if (mapping.empty()) {
    throw std::invalid_argument(what + ": a tile mapping needs at least one tile");
  }
  std::vector<Interval> all;
  for (std::size_t tile = 0; tile < mapping.size(); ++tile) {
    for (const auto &interval : mapping[tile]) {
      if (interval.first > interval.second || interval.second > numElements) {
        throw std::invalid_argument(
            what + ": tile " + std::to_string(tile) + " has interval [" +
            std::to_string(interval.first) + ", " + std::to_string(interval.second) +
            ") outside [0, " + std::to_string(numElements) + ")");
      }
      if (interval.first < interval.second) {
        all.push_back(interval);
      }
    }
  }
  std::sort(all.begin(), all.end());
  std::size_t covered = 0;
  for (const auto &interval : all) {
    if (interval.first < covered) {
      throw std::invalid_argument(what + ": element " + std::to_string(interval.first) +
                                  " is mapped to more than one tile");
    }
    if (interval.first > covered) {
      break;
    }
    covered = interval.second;
  }
  if (covered != numElements) {
    throw std::invalid_argument(what + ": element " + std::to_string(covered) +
                                " is not mapped to any tile");
  }
}

std::vector<std::size_t> elementsPerTile(const TileMapping &mapping) {
  std::vector<std::size_t> counts(mapping.size(), 0);
  for (std::size_t tile = 0; tile < mapping.size(); ++tile) {
    for (const auto &interval : mapping[tile]) {
      counts[tile] += interval.second - interval.first;
    }
  }
  return counts;
}

} // namespace popart_unwind
