#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/ir/graph.h"

namespace loopserve::engine {

// Translates an OpenVINO IR (versions 10 and 11: the `.xml` topology and the `.bin` weights) into
// the engine IR. Parameters become graph inputs and Results graph outputs, named by their tensor
// names (the ports' `names`, else the layer name) as clients address them; Const layers become
// constants copied out of `weights`; ordinary layers are lowered to ONNX-named ops or "ov:" ops
// (engine/import/openvino/op_lowering.h); Loop-5 and TensorIterator-1 become "Loop" nodes with
// their body as an owned subgraph and a LoopSpec read from port_map and back_edges (a negative
// trip count, or none, runs until the body's condition is false).
//
// The XML is untrusted: ids, ports, edges, port maps, back edges, element types and .bin ranges
// are validated, and every error names the layer's id, name and type. InvalidArgument for a
// malformed model, Unimplemented for a supported-format model using something we do not run.
// Neither argument needs to outlive the call.
absl::StatusOr<std::shared_ptr<Graph>> ImportOpenVinoModel(absl::string_view xml,
                                                           absl::string_view weights);

}  // namespace loopserve::engine
