#include "bias_mapping.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include "linear_mapping.hpp"

namespace popart_unwind {

TileMapping biasTileMapping(const TileMapping &activation, std::size_t numElements,
                            std::size_t numChannels) {
  if (numChannels == 0) {
    if (numElements != 0) {
      throw std::invalid_argument("bias mapping: a tensor with elements has at least one channel");
    }
    return TileMapping(activation.size());
  }
  if (numElements % numChannels != 0) {
    throw std::invalid_argument("bias mapping: " + std::to_string(numElements) +
                                " elements are not a whole number of rows of " +
                                std::to_string(numChannels) + " channels");
  }
  checkTileMapping(activation, numElements, "bias mapping: activation mapping");
  const std::size_t numTiles = activation.size();
  if (numElements == 0) {
    return linearTileMapping(numChannels, numTiles, 1, 0);
  }
  const std::size_t C = numChannels;
  std::vector<std::size_t> bestCount(C, 0);
  std::vector<std::size_t> bestTile(C, 0);
  // Per tile: every channel gets `whole` elements from the full rows of its intervals, and the
  // partial rows add one to a (possibly wrapping) range of channels, kept as differences.
  std::vector<long long> diff(C + 1, 0);
  for (std::size_t tile = 0; tile < numTiles; ++tile) {
    if (activation[tile].empty()) {
      continue;
    }
    std::fill(diff.begin(), diff.end(), 0);
    std::size_t whole = 0;
    for (const auto &[begin, end] : activation[tile]) {
      const std::size_t length = end - begin;
      whole += length / C;
      const std::size_t rest = length % C;
      if (rest == 0) {
        continue;
      }
      const std::size_t first = begin % C;
      if (first + rest <= C) {
        diff[first] += 1;
        diff[first + rest] -= 1;
      } else {
        diff[first] += 1;
        diff[C] -= 1;
        diff[0] += 1;
        diff[first + rest - C] -= 1;
      }
    }
    long long running = 0;
    for (std::size_t c = 0; c < C; ++c) {
      running += diff[c];
      const std::size_t count = whole + static_cast<std::size_t>(running);
      if (count > bestCount[c]) {
        bestCount[c] = count;
        bestTile[c] = tile;
      }
    }
  }
  TileMapping mapping(numTiles);
  for (std::size_t c = 0; c < C; ++c) {
    appendInterval(mapping[bestTile[c]], c, c + 1);
  }
  return mapping;
}

} // namespace popart_unwind
