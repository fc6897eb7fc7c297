#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "proto/model_config.pb.h"
#include "server/repository/model_config.h"

// What the files of model_config.h share among themselves (parsing: model_config.cc,
// validation: model_config_check.cc, auto-complete: model_config_complete.cc, ModelIo:
// model_io.cc). Not for use outside server/repository/model_config*.cc and model_io.cc.

namespace loopserve::server {

inline constexpr char kOnnxPlatform[] = "onnxruntime_onnx";
inline constexpr char kOnnxBackend[] = "onnxruntime";
inline constexpr char kOpenVino[] = "openvino";

template <typename Repeated>
std::vector<int64_t> ToVector(const Repeated& field) {
  return std::vector<int64_t>(field.begin(), field.end());
}

// Triton settings that mean nothing on a CPU server with one engine, one line each; ClearIgnored
// removes the same fields (model_config_check.cc).
std::vector<std::string> IgnoredSettings(const inference::ModelConfig& config);
void ClearIgnored(inference::ModelConfig& config);
// "[1,-1,3]", at most 16 dims shown.
std::string FormatDims(absl::Span<const int64_t> dims);
// A numeric loopserve parameter's value; InvalidArgument naming `key`.
absl::StatusOr<int64_t> ParseParameter(const inference::ModelParameter& value,
                                       absl::string_view key);
absl::StatusOr<engine::LoopThreads> ParseLoopThreadsParameter(
    const inference::ModelParameter& value);
absl::StatusOr<engine::LoadOptions::Precision> ParsePrecisionParameter(
    const inference::ModelParameter& value);
// The comma-separated items of a parameter's string value, stripped; empty items kept.
std::vector<std::string> ParameterItems(const inference::ModelConfig& config,
                                        absl::string_view key);
// The checks of ParseModelConfig that follow a successful parse.
absl::Status CheckParsed(ParsedModelConfig& parsed, absl::string_view model_name);
// The Triton type name of an engine type, for messages ("TYPE_FP32") (model_config_complete.cc).
std::string ConfigTypeName(engine::DataType type);
// The index of the spec named `name`, -1 when none.
int FindSpec(const std::vector<engine::TensorSpec>& specs, absl::string_view name);

}  // namespace loopserve::server
