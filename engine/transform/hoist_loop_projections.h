#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Moves the input projections of a recurrent body out of its Loop. A body that takes the
// iteration's step of a loop-invariant sequence, `x_t = Gather(X, i, axis=0)` with X captured
// from the enclosing graph and i the iteration counter, and multiplies it by invariant weights,
// `MatMul(x_t, W)` (W constant or captured, rank 2) or `Gemm(x_t, B, C)` (transA 0, B and C
// constant, X of rank 3), computes for each step a row block of one product over the whole
// sequence. The product moves before the Loop, `P = MatMul(X, W')` [+ C'] with W' = alpha * B
// (transposed when transB) and C' = beta * C, and the body reads its step, `Gather(P, i, axis=0)`.
// One GEMM over T x batch rows runs at the machine's GEMM rate where T products of batch rows
// each did not (the RNN/GRU/LSTM cells PyTorch and TF export carry one such product per gate
// group beside the recurrent one); the recurrent product `h W_hh` stays in the body. Only for
// steps of at most 4 rows or weights of at least 1 MB (X's dims known): otherwise the product is
// already GEMM-bound in the body, and hoisted it was slower (its T-step result leaves the cache).
//
// The Loop node keeps its port map; its body is replaced and captures P, its implicit inputs gain
// P. The x_t Gather goes when nothing else reads it. What changes: every step of X is projected
// even when the Loop stops early (a trip count or condition below X's length), and the product
// runs before the first iteration, so an X whose last dim does not match W fails before it
// instead of at it. A step i past X's end still fails in the body's Gather, as before.
class HoistLoopProjectionsPass final : public Pass {
 public:
  const char* name() const override { return "hoist_loop_projections"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
