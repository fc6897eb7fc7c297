#pragma once

// The graph optimizer: passes that rewrite a Graph before Plan::Compile turns it into kernels.
// One pass per file, each with a unit test on a small graph (tests/unit/engine/transform/); the
// default pipeline (pipeline.h) runs them in order on every graph, Loop bodies included, and
// `looprun --dump_plan` prints each graph before and after with the rewrites that fired.
//
// A pass is stateless and thread-safe; Run mutates only the graph it is given.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/ir/graph.h"

namespace loopserve::engine::transform {

// What a pass may consult besides the graph.
struct TransformContext {
  // The constant `id` of the graph being rewritten stands for (its own constants or, through its
  // captures, an enclosing graph's), or null.
  std::function<const Tensor*(ValueId id)> find_constant;
  // Runs `node` once on `inputs` (one per node input, null for an omitted one) with the engine's
  // own kernels and returns one tensor per node output; empty when the graph is not compiled
  // (then nothing is folded). Set by Plan::Compile (runtime/node_evaluator.h).
  std::function<absl::StatusOr<std::vector<Tensor>>(const Node& node,
                                                    const std::vector<const Tensor*>& inputs)>
      evaluate;
  // Whether the graph's inputs are checked against their declared types on every run (the
  // model's top-level graph; not a Loop body or If branch): a fully known declared shape is then
  // a fact the passes may fold (Shape of such an input).
  bool inputs_checked = false;
  // LoadOptions::precision is kBf16: products with constant float32 weights may run in bfloat16
  // (engine/transform/bf16_products.h).
  bool bf16_products = false;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual const char* name() const = 0;
  // Rewrites `graph` in place (nodes stay in topological order) and appends one line per rewrite
  // to `log`. A pass that finds nothing to do leaves the graph untouched.
  virtual absl::Status Run(Graph& graph, const TransformContext& context,
                           std::vector<std::string>& log) const = 0;
};

}  // namespace loopserve::engine::transform
