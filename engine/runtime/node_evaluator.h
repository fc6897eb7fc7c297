#pragma once

// Runs one node once on given tensors with the engine's own kernels: how the constant folding
// pass (engine/transform/fold_constants.h) evaluates a node whose inputs are all constant.

#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/kernels/registry.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine {

// The outputs of `node` (a copy is compiled into a one-node graph, without the optimizer, and run
// once) for `inputs` (one per node input; null for an omitted one). One tensor per node
// output (empty for an omitted one). Unimplemented when no kernel of `registry` takes the node,
// the kernel's error when it rejects the inputs, InvalidArgument when an output is not a tensor.
absl::StatusOr<std::vector<Tensor>> EvaluateNode(const KernelRegistry& registry, const Node& node,
                                                 const std::vector<const Tensor*>& inputs);

}  // namespace loopserve::engine
