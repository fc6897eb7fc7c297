#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/model_config.pb.h"

namespace loopserve::server {

// Parses the protobuf text format of loopserve.ModelConfig (a model's config.pbtxt) and checks it:
// `name`, when set, must equal `model_name`; a specific policy lists positive versions; the
// iteration cap is not negative. InvalidArgument with the parser's line:column otherwise.
absl::StatusOr<loopserve::ModelConfig> ParseModelConfig(absl::string_view text,
                                                        absl::string_view model_name);

// Largest config.pbtxt read.
inline constexpr uintmax_t kMaxModelConfigBytes = 1 << 20;

// Reads `<model_dir>/config.pbtxt`; the defaults (latest 1) when the file does not exist,
// InvalidArgument when it is larger than kMaxModelConfigBytes or malformed.
absl::StatusOr<loopserve::ModelConfig> ReadModelConfig(const std::string& model_dir,
                                                       absl::string_view model_name);

}  // namespace loopserve::server
