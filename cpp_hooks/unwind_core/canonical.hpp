// Canonicalization of chains, so that chains of one meaning become op-wise identical.
//
// Port of popart_unwind.memory.canonical with the same rules and the same leftmost-first
// rewrite order, so that both give the same canonical ops: single ops are simplified,
// neighbours of one type merge, cancelling pairs and fill/sample pairs take their normal
// form, neighbours out of OpType order swap where an exact rewrite exists, and a chain
// that reaches nothing becomes one fixed form with the same shapes.
#pragma once

#include <optional>
#include <stdexcept>
#include <vector>

#include "unwind_core/chain.hpp"

namespace popart_unwind::core {

// A rewrite reported success without changing anything, or rewriting did not stop within
// the cap: both would be bugs in a rule.
struct CanonicalizationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The canonical form of `ops` from `in` (not memoised; Chain::canonicalized is).
// The default cap is 64 + 8 (n + 2)^2 rewrites for n ops, as in the Python reference.
std::vector<Op> canonicalOps(const Shape &in, std::vector<Op> ops,
                             std::optional<long> maxRewrites = std::nullopt);

// Drops every memoised canonical form.
void clearCanonicalMemo();

// The pieces of the rewrite system, exposed for tests and reuse.
std::optional<std::vector<Op>> simplifyOp(const Op &op);
Op mergeOps(const Op &first, const Op &second);
std::vector<Op> emptyChain(const Shape &in, const Shape &out);
// Elements of the output of the first `count` ops that input elements reach.
Regions reached(const Shape &in, const std::vector<Op> &ops, std::size_t count);

} // namespace popart_unwind::core
