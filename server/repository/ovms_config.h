#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/model_config.pb.h"
#include "server/repository/model_config.h"

namespace loopserve::server {

// OpenVINO Model Server's `config.json` (`ovms --config_path`): the models to serve, each from its
// own base path. Only `model_config_list` is served; stateless functions, thread-safe.
//
//   { "model_config_list": [
//       { "config": { "name": "rnn", "base_path": "models/rnn", "nireq": 2,
//                     "model_version_policy": { "latest": { "num_versions": 2 } },
//                     "target_device": "CPU", "plugin_config": { "NUM_STREAMS": "1" } } } ] }

// One entry of model_config_list.
struct OvmsModelEntry {
  std::string name;
  // The model folder (holding numbered version folders): base_path as given when absolute,
  // otherwise resolved against the folder of config.json (as OVMS does).
  std::string base_path;
  std::optional<inference::ModelVersionPolicy> version_policy;  // model_version_policy
  int64_t nireq = 0;  // the instance count; 0 = the default
  // plugin_config's INFERENCE_PRECISION_HINT as the precision parameter: "fp32" for "f32",
  // "bf16" for "bf16"; empty when not given.
  std::string precision;
  // Accepted settings that mean nothing to loopserve (target_device other than CPU,
  // plugin_config, shape/batch_size "auto", stateful-model settings): one line each, logged once.
  std::vector<std::string> ignored;
};

struct OvmsConfig {
  std::vector<OvmsModelEntry> models;  // in file order; names are unique
  std::vector<std::string> ignored;    // file-level settings loopserve ignores (monitoring)
};

// Parses config.json text; `config_dir` is the folder relative base paths start from. Errors
// start with "config.json: " and name the JSON path:
//   InvalidArgument: nested deeper than kMaxConfigNesting (server/repository/repo_file.h; checked
//   before
//     parsing), not JSON (simdjson's kind of error, never the text), not an object, a missing or
//     misspelt key (the schema of OVMS has no other keys either), a value of the wrong type or
//     range (nireq < 0, num_versions < 1, a version < 1, an INFERENCE_PRECISION_HINT other than
//     f32 or bf16), a model name that is not one folder
//     name, a name listed twice, a version policy without exactly one of latest/all/specific.
//   Unimplemented: pipelines, MediaPipe graphs, custom loaders or node libraries (non-empty
//     lists), a cloud-storage base_path (gs://, s3://, azure://), stateful models, custom loader
//     options, and shape/batch_size/layout other than "auto" (loopserve serves the model's own
//     shapes).
absl::StatusOr<OvmsConfig> ParseOvmsConfig(absl::string_view json, const std::string& config_dir);

// Largest config.json read: room for some 20,000 models; the costliest file of this size (every
// byte a bracket, 30 deep) parses in under a second, so a stop during start-up is never held up
// by the parse for long.
inline constexpr uintmax_t kMaxOvmsConfigBytes = 4 << 20;

// Reads and parses the file at `path` (ReadOperatorFile): NotFound when it does not exist,
// InvalidArgument when it is no regular file or larger than kMaxOvmsConfigBytes; error messages
// do not show the path.
absl::StatusOr<OvmsConfig> ReadOvmsConfig(const std::string& path);

// Applies an entry's settings over `parsed` (the model's config.pbtxt in its base path, if any, or
// the defaults): the version policy when given, `nireq` as one CPU instance group of that count,
// and the ignored settings. The entry wins where both say something.
void ApplyOvmsEntry(const OvmsModelEntry& entry, ParsedModelConfig& parsed);

}  // namespace loopserve::server
