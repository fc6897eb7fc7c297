#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Softmax / LogSoftmax + the elementwise chain after it (Add/Sub/Mul/... with broadcasting,
// activations) whose intermediate values have no other reader -> the same op with the chain as
// its FusionSpec's post-ops: the kernel applies them to each row while it is in cache, and a
// LogSoftmax followed by adding a per-row value (a beam search's running scores: logp +
// score[:, None]) folds that value into the row's own shift, with no pass of its own. Measured
// on the grid's beam-search steps.
class FuseSoftmaxPass final : public Pass {
 public:
  const char* name() const override { return "fuse_softmax"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
