#pragma once

// Fused nodes' post-ops (engine/ir/fusion.h) as native elementwise chains.

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/ir/fusion.h"
#include "engine/kernels/native/elementwise_chain.h"
#include "engine/kernels/native/vector_math.h"

namespace loopserve::engine::native {

// The chain of `post_ops` for a node of `num_inputs` inputs.
// - `epilogue_inputs` null: operand i is node input i (a kElementwiseOp: value = input 0).
// - else an epilogue over a product already in the output: operand 0 is the output, and each
//   node input a post-op reads becomes operand 1, 2, ... (*epilogue_inputs lists those inputs).
// InvalidArgument for a post-op reading an input the node does not have, or more operands than a
// chain takes.
absl::StatusOr<ElementwiseChain> ChainOfPostOps(absl::Span<const PostOp> post_ops, int num_inputs,
                                                std::vector<int>* epilogue_inputs);

}  // namespace loopserve::engine::native
