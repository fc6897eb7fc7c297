#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Opt-in bf16 (TransformContext::bf16_products, from LoadOptions::precision = kBf16): every
// MatMul or kFusedMatMulOp (no transposes) whose B is a constant float32 matrix becomes a
// kBf16MatMulOp node with the same inputs and post-ops, whose kernel (native/bf16_matmul.h)
// runs the product in bfloat16 with float32 accumulation from 4 rows on and in float32 below;
// elementwise math stays float32. Runs last, after the fusions, so the epilogues are kept. A
// no-op unless asked for.
class Bf16ProductsPass final : public Pass {
 public:
  const char* name() const override { return "bf16_products"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
