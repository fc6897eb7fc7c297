#include "engine/import/onnx_importer.h"

namespace loopserve::engine {

absl::StatusOr<std::shared_ptr<Graph>> ImportOnnxModel(absl::string_view serialized) {
  return absl::UnimplementedError("ONNX import is not written yet");
}

}  // namespace loopserve::engine
