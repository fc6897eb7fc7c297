#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// A Conv and the elementwise chain after it (activations; Add/Sub/Mul/Div/Max/Min of a constant
// that broadcasts per channel or is a scalar) become one Conv node carrying the chain as post-ops
// (Node::fusion); its kernel applies them as a native epilogue while the result is in cache,
// instead of one step and one buffer per op. The
// fused node's inputs are X, W, B (kNoValue when the Conv had no bias) and then the post-ops'
// operands. HardSwish written out as x * Clip(x + 3, 0, 6) / 6 (PaddlePaddle's export) is
// recognised as one post-op, although x has two readers there. A binary op with a computed operand
// (a residual Add, a squeeze-excitation Mul) ends the chain: its shape is unknown here, and an
// operand larger than the Conv's result would send every run to the unfused nodes.
class FuseConvPass final : public Pass {
 public:
  const char* name() const override { return "fuse_conv"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
