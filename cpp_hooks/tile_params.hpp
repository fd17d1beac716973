// The one parameter object every layout hook takes: an IPU's figures for one element type.
//
// The Python IPU Model (popart_unwind.machine.IpuModel) derives these from its documented
// figures (docs/ipu-model.md) and hands them over as one typed object, so no hook takes a
// loose list of integers and none restates how a figure is derived.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace popart_unwind {

struct TileParams {
  std::size_t numTiles = 1;               // tiles of one IPU
  std::size_t elementBytes = 1;           // bytes of one element of the tensor laid out
  std::size_t grainElements = 1;          // linear mapping: elements per grain
  std::size_t minElementsPerTile = 0;     // linear mapping: fewest elements on a used tile
  std::size_t partialBytesPerElement = 4; // matmul: bytes of one partial sum
  std::size_t exchangeBytesPerCycle = 4;  // bytes one tile receives per cycle
  std::size_t macsPerCycle = 1;           // matmul: multiply-accumulates per tile per cycle
  std::size_t syncCycles = 0;             // cycles of one BSP sync
  bool vertexCosts = true;                // matmul: Poplibs' vertex estimates, or peak MACs only
  // matmul plans: a tile's temporary bytes the plan may use (Poplibs'
  // availableMemoryProportion of the tile); over it, serial steps, or the plan of least
  // temporary memory
  std::size_t tempBytesLimit = static_cast<std::size_t>(-1);
  // tiles sharing one exchange bus (a Mk2 super tile: 2), which receive the same data
  // together; 1: no sharing
  std::size_t tilesPerExchangeBus = 1;

  // Throws std::invalid_argument (Python: ValueError) naming the first figure out of range.
  void check() const {
    const std::pair<const char *, std::size_t> positive[] = {
        {"num_tiles", numTiles},
        {"element_bytes", elementBytes},
        {"grain_elements", grainElements},
        {"partial_bytes_per_element", partialBytesPerElement},
        {"exchange_bytes_per_cycle", exchangeBytesPerCycle},
        {"macs_per_cycle", macsPerCycle},
        {"tiles_per_exchange_bus", tilesPerExchangeBus}};
    for (const auto &[name, value] : positive) {
      if (value == 0) {
        throw std::invalid_argument(std::string("tile parameter ") + name +
                                    " must be at least 1");
      }
    }
  }
};

inline std::size_t ceilDiv(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// Start of part `part` when `size` items are cut into `parts` nearly equal contiguous parts
// (sizes differ by at most one; part `parts` starts at `size`).
inline std::size_t partBegin(std::size_t size, std::size_t parts, std::size_t part) {
  return part * size / parts;
}

} // namespace popart_unwind
