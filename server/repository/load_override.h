#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loopserve::server {

// Triton's parameters of a model load request, whatever the protocol: `config`, a ModelConfig as
// JSON that replaces the model's config.pbtxt, and `file:<path>` entries, model files sent in the
// request (<path> is relative to the model's folder: "1/model.onnx"). Files need a config.
struct LoadParameters {
  std::optional<std::string> config_json;
  std::vector<std::pair<std::string, std::string>> files;  // path, contents
  bool empty() const { return !config_json.has_value() && files.empty(); }
};

// The most bytes the files of one load request may hold together.
inline constexpr uint64_t kMaxLoadFilesBytes = uint64_t{1} << 30;

// Triton's JSON ModelConfig as config.pbtxt text (protobuf's JSON names: snake_case or
// lowerCamelCase; 64-bit and 32-bit integers as numbers or strings). InvalidArgument naming the
// first problem.
absl::StatusOr<std::string> ConfigJsonToText(absl::string_view json);

// Writes `files` into `dir` (which must not exist; made 0700, and its parents too), never outside
// it: every path is relative, its parts non-empty, not "." or "..", without NUL; files are created
// new (O_EXCL, O_NOFOLLOW) in folders made here. InvalidArgument for a path that would leave the
// folder, names a file twice or is also a folder of another path ("1" and "1/model.onnx"),
// RESOURCE_EXHAUSTED past kMaxLoadFilesBytes, INTERNAL ("failed to poll from model repository",
// Triton's words) for a name the file system refuses.
absl::Status WriteLoadFiles(const std::string& dir,
                            const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace loopserve::server
