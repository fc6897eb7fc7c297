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
#include "engine/ir/graph.h"

namespace loopserve::engine::transform {

// What a pass may consult besides the graph.
struct TransformContext {
  // The constant `id` of the graph being rewritten stands for (its own constants or, through its
  // captures, an enclosing graph's), or null.
  std::function<const Tensor*(ValueId id)> find_constant;
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
