#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/ir/graph.h"

namespace google::protobuf::io {
class ZeroCopyInputStream;
}

namespace loopserve::engine {

// Translates a serialized ONNX ModelProto into the engine IR: initializers and Constant nodes
// become graph constants, graph inputs that are also initializers become constants (ONNX IR < 4
// style), nodes keep their ONNX op names with the opset of their domain, subgraph attributes become
// owned Graphs whose reads of enclosing-scope names become Captures, and Loop nodes get their
// LoopSpec. InvalidArgument for malformed models (naming the node), Unimplemented for unsupported
// element types or domains.
absl::StatusOr<std::shared_ptr<Graph>> ImportOnnxModel(absl::string_view serialized);
// The same, reading the serialized model from `input` (a file read in pieces).
absl::StatusOr<std::shared_ptr<Graph>> ImportOnnxModel(
    google::protobuf::io::ZeroCopyInputStream& input);

}  // namespace loopserve::engine
