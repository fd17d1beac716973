// The block chain of benchmarks/unwind_blocks.py, built with poprithms' own unwinding API
// and solved by its Greedy0, so that both solvers are timed on one graph in one run.
//
//   block_chain BLOCKS VARIANT   ->   prints "seconds score" (the solve alone is timed)
//
// Block i (rows 8, cols 16), as unwind_blocks.build states it: x is a fresh sink (variant
// 0) or the top half of a tall sink whose reversed bottom half is tied to the previous
// activation at 2 (variant 1); u = sum_like(previous, x) unwinding to x, at 3; the matmul's
// lhs is u reshaped and transposed, tied to a source at 9; its weight a sink tied to a
// source at 10; their barrier plus a bias sink is the next activation, at 20.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include <poprithms/memory/unwind/graph.hpp>
#include <poprithms/memory/unwind/solution.hpp>

namespace unwind = poprithms::memory::unwind;
using poprithms::common::multiout::InIndex;
using poprithms::common::multiout::TensorId;
using poprithms::ndarray::Dimensions;
using poprithms::ndarray::Shape;
using poprithms::util::Permutation;

static unwind::Graph blockChain(long blocks, int variant) {
  const int64_t rows = 8, cols = 16;
  unwind::Graph g;
  TensorId previous = g.sink(Shape({rows, cols}));
  g.insertValuedPair(previous, g.source(Shape({rows, cols})), 1.0);
  for (long block = 0; block < blocks; ++block) {
    TensorId x;
    if (variant == 0) {
      x = g.sink(Shape({rows, cols}));
    } else {
      const TensorId tall = g.sink(Shape({2 * rows, cols}));
      x = g.slice(tall, unwind::Lower{0, 0}, unwind::Upper{rows, cols});
      const TensorId bottom = g.slice(tall, unwind::Lower{rows, 0},
                                      unwind::Upper{2 * rows, cols});
      g.insertValuedPair(g.reverse(bottom, Dimensions({1})), previous, 2.0);
    }
    const TensorId u = g.sumLike({previous, x}, std::vector<InIndex>{InIndex(1)}, 3.0).out();
    const TensorId lhs =
        g.dimShuffle(g.reshape(u, Shape({cols, rows})), Permutation({1, 0}));
    g.insertValuedPair(lhs, g.source(Shape({rows, cols})), 9.0);
    const TensorId weight = g.sink(Shape({cols, cols}));
    g.insertValuedPair(weight, g.source(Shape({cols, cols})), 10.0);
    const TensorId product(g.barrier({lhs, weight}, {Shape({rows, cols})}), 0);
    const TensorId bias = g.sink(Shape({cols}));
    previous = g.sumLike({product, bias}, InIndex(0), 20.0).out();
  }
  return g;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s BLOCKS VARIANT\n", argv[0]);
    return 2;
  }
  unwind::Graph g = blockChain(std::atol(argv[1]), std::atoi(argv[2]));
  const auto start = std::chrono::steady_clock::now();
  const unwind::Solution solution(std::move(g), unwind::Algo::Greedy0);
  const auto stop = std::chrono::steady_clock::now();
  std::printf("%.6f %.1f\n", std::chrono::duration<double>(stop - start).count(),
              solution.getScore());
  return 0;
}
