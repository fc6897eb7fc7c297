#pragma once

// Growing a chain of elementwise ops from a value: the shared core of the elementwise and MatMul
// epilogue fusions. A chain starts at one value; each absorbed node reads the chain's current
// value (and at most one other operand) and has it as its only reader.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/ir/fusion.h"
#include "engine/ir/graph.h"
#include "engine/transform/graph_util.h"
#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// The fused node being built: its inputs (deduplicated), post-ops and the nodes it replaces.
struct ChainBuilder {
  static constexpr int kMaxInputs = 8;  // native::ElementwiseChain::kMaxOperands

  std::vector<ValueId> inputs;
  std::vector<PostOp> post_ops;
  std::vector<int> nodes;  // indices of the absorbed nodes, in order
  ValueId value = kNoValue;

  // The input index of `v`, adding it when new; -1 when the chain has no room left.
  int InputIndex(ValueId v);

  // Appends node `n` when it is an elementwise op on `value` (and `value`'s only reader): ONNX
  // Add/Sub/Mul/Div/Max/Min/Pow (scalar constant exponent) and unary activations, or an
  // kElementwiseOp node whose input 0 is `value`. Returns whether it did.
  bool Absorb(const Graph& graph, int n, const TransformContext& context);

  // Absorbs readers of `value` while it has exactly one and Absorb accepts it.
  void Grow(const Graph& graph, const ValueUses& uses, const std::vector<bool>& removed,
            const TransformContext& context);

  // Replaces the chain's nodes by `fused` (its head node, op type set by the caller) carrying
  // `spec` with the chain's post-ops and the subgraph it replaces (the unfused fallback), and logs
  // "<pass>: <nodes> -> <op> [<fusion>]": the last step of every chain fusion.
  void Replace(Graph& graph, Node fused, std::shared_ptr<FusionSpec> spec, absl::string_view pass,
               std::vector<std::string>& log, std::vector<bool>& removed) const;
};

// Whether `node` is an elementwise op the fusions know (with its other operands aside).
bool IsFusableElementwise(const Node& node, const TransformContext& context);

}  // namespace loopserve::engine::transform
