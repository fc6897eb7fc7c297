#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Two rewrites of every Loop node's body (the node keeps its port map; the body attribute is
// replaced). (1) A carried result `Identity(param)` of its own parameter becomes the parameter:
// the Loop kernel then neither runs the Identity nor hands the value over (the ONNX condition
// `cond_out = Identity(cond_in)`). (2) A scan output whose body result is `Identity(x)`, read by
// nothing else, reads x and the Identity is dropped: the Loop copies each scan slice out of the
// body before it hands back edges on, so x still holds the iteration's value, and the copy (16 KB
// per iteration for a large slice) and the dispatch are saved.
class ElideLoopIdentitiesPass final : public Pass {
 public:
  const char* name() const override { return "elide_loop_identities"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
