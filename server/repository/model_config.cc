#include "server/repository/model_config.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "engine/base/status_macros.h"
#include "engine/tensor/scalar_like.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "server/repository/repo_file.h"

namespace loopserve::server {
namespace {

namespace fs = std::filesystem;
using inference::ModelConfig;

constexpr char kOnnxPlatform[] = "onnxruntime_onnx";
constexpr char kOnnxBackend[] = "onnxruntime";
constexpr char kOpenVino[] = "openvino";

// ---- Names that are no Triton field ----

// loopserve's settings before they moved to `parameters` and `instance_group`: the error says
// where they went.
constexpr std::pair<absl::string_view, absl::string_view> kMovedFields[] = {
    {"max_loop_iterations",
     "parameters { key: \"max_loop_iterations\" value: { string_value: \"N\" } }"},
    {"max_output_bytes", "parameters { key: \"max_output_bytes\" value: { string_value: \"N\" } }"},
    {"max_request_memory_bytes",
     "parameters { key: \"max_request_memory_bytes\" value: { string_value: \"N\" } }"},
    {"instance_count", "instance_group [ { count: N kind: KIND_CPU } ]"},
};

// Collects the text parser's errors instead of letting protobuf log them to stderr, worded so that
// they never repeat the file's text: protobuf quotes the tokens it stumbles on, and a config.pbtxt
// that is not a config at all would have its first word shown to whoever reads the error
// (RepositoryIndex). Each error keeps its line:column and protobuf's wording up to the first
// quoted or quoted-after-colon token.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    errors_.push_back(absl::StrCat(line + 1, ":", column + 1, ": ", Reword(message)));
  }
  void AddWarning(int line, int column, const std::string& message) override {}

  std::string Errors() const { return absl::StrJoin(errors_, "; "); }

 private:
  // protobuf: Message type "inference.ModelConfig" has no field named "foo".
  static std::string Reword(const std::string& message) {
    const std::string type_prefix = "Message type \"";
    const std::string field_prefix = "\" has no field named \"";
    const size_t field_at = message.find(field_prefix);
    if (!absl::StartsWith(message, type_prefix) || field_at == std::string::npos) {
      return WithoutTokens(message);
    }
    // The type name comes from the schema, the field name from the file.
    const std::string type = message.substr(type_prefix.size(), field_at - type_prefix.size());
    std::string field = message.substr(field_at + field_prefix.size());
    while (!field.empty() && (field.back() == '.' || field.back() == '"')) field.pop_back();
    if (type == "inference.ModelConfig") {
      for (const auto& [moved, spelling] : kMovedFields) {
        if (field == moved) {
          return absl::StrCat("'", moved, "' is no longer a top-level field; Triton's spelling is ",
                              spelling);
        }
      }
    }
    const bool known_type =
        google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type) != nullptr;
    return absl::StrCat("unknown field name in ", known_type ? type : "a message",
                        " (not a field of Triton's model configuration)");
  }

  // protobuf's message up to the first token it quotes ("Expected identifier, got: x",
  // "Expected \":\", found \"x\"", "Couldn't parse integer: x", "Integer out of range (x)").
  static std::string WithoutTokens(absl::string_view message) {
    const size_t cut = std::min({message.find('"'), message.find(": "), message.find('(')});
    if (cut == absl::string_view::npos) return std::string(message);
    absl::string_view kept = absl::StripTrailingAsciiWhitespace(message.substr(0, cut));
    while (!kept.empty() && (kept.back() == ',' || kept.back() == ':')) kept.remove_suffix(1);
    return absl::StrCat(kept, " (the text there is not shown)");
  }

  std::vector<std::string> errors_;
};

// Triton settings loopserve cannot honour: Unimplemented naming the field.
absl::Status RejectUnsupported(const ModelConfig& config) {
  auto reject = [](absl::string_view field, absl::string_view what) {
    return absl::UnimplementedError(absl::StrCat(field, ": loopserve does not implement ", what));
  };
  if (config.sequence_batching().iterative_sequence()) {
    return reject("sequence_batching.iterative_sequence", "iterative sequences");
  }
  if (config.has_ensemble_scheduling()) return reject("ensemble_scheduling", "ensembles");
  if (config.batch_input_size() > 0) return reject("batch_input", "batch inputs");
  if (config.batch_output_size() > 0) return reject("batch_output", "batch outputs");
  if (config.model_operations().op_library_filename_size() > 0) {
    return reject("model_operations", "custom operation libraries");
  }
  if (config.model_repository_agents().agents_size() > 0) {
    return reject("model_repository_agents", "repository agents");
  }
  if (config.model_transaction_policy().decoupled()) {
    return reject("model_transaction_policy.decoupled",
                  "decoupled models (it answers each request exactly once)");
  }
  return absl::OkStatus();
}

// Triton settings that mean nothing on a CPU server with one engine: one line each (the registry
// logs them once per config change). ClearIgnored removes the same fields.
std::vector<std::string> IgnoredSettings(const ModelConfig& config) {
  std::set<std::string> lines;
  auto note = [&](absl::string_view field, absl::string_view why) {
    lines.insert(absl::StrCat(field, " ignored: ", why));
  };
  if (!config.runtime().empty()) note("runtime", "loopserve has one engine, no backend libraries");
  if (config.has_optimization()) {
    note("optimization",
         "GPU, TensorRT and ONNX Runtime optimization settings do not apply to loopserve's engine");
  }
  if (!config.cc_model_filenames().empty()) {
    note("cc_model_filenames", "CUDA compute-capability files do not apply on the CPU");
  }
  if (!config.metric_tags().empty()) {
    note("metric_tags", "loopserve's metrics carry model and version labels only");
  }
  if (config.has_model_metrics()) note("model_metrics", "loopserve's histogram buckets are fixed");
  if (config.response_cache().enable()) {
    note("response_cache.enable", "loopserve keeps no response cache");
  }
  if (config.has_sequence_batching()) {
    const inference::ModelSequenceBatching& sequence = config.sequence_batching();
    if (sequence.direct().max_queue_delay_microseconds() > 0 ||
        sequence.direct().minimum_slot_utilization() > 0) {
      note("sequence_batching.direct queue delay / slot utilization",
           "direct runs each step as soon as it is ready");
    }
    if (sequence.oldest().preferred_batch_size_size() > 0) {
      note("sequence_batching.oldest.preferred_batch_size",
           "oldest takes every ready step up to max_batch_size");
    }
    for (const auto& state : sequence.state()) {
      if (state.use_same_buffer_for_input_output()) {
        note("sequence_batching.state.use_same_buffer_for_input_output",
             "a GPU backend's setting; loopserve copies the state output into the slot");
      }
    }
  }
  if (config.has_dynamic_batching()) {
    const inference::ModelDynamicBatching& batching = config.dynamic_batching();
    if (batching.priority_levels() > 0) {
      note("dynamic_batching.priority_levels", "the batcher has one queue, in arrival order");
    }
    if (batching.has_default_queue_policy() || !batching.priority_queue_policy().empty()) {
      note("dynamic_batching queue policies",
           "the batch queue is bounded by --max_queue_size; request deadlines come from the "
           "client (timeout parameter or gRPC deadline)");
    }
  }
  for (int i = 0; i < config.instance_group_size(); ++i) {
    const inference::ModelInstanceGroup& group = config.instance_group(i);
    const std::string what = absl::StrCat("instance_group[", i, "]");
    if (group.kind() == inference::ModelInstanceGroup::KIND_GPU) {
      note(absl::StrCat(what, ": KIND_GPU"), "loopserve runs on the CPU");
      continue;
    }
    if (group.gpus_size() > 0) note(what + ".gpus", "loopserve runs on the CPU");
    if (group.has_rate_limiter()) {
      note(what + ".rate_limiter",
           "loopserve has no rate limiter; --workers and the instance count bound concurrency");
    }
    if (group.secondary_devices_size() > 0) {
      note(what + ".secondary_devices", "secondary devices are GPU/DLA settings");
    }
    if (group.profile_size() > 0) note(what + ".profile", "TensorRT profiles do not apply");
    if (group.passive()) note(what + ".passive", "every loopserve instance takes requests");
    if (!group.host_policy().empty()) {
      note(what + ".host_policy", "host policies are not implemented");
    }
  }
  for (const inference::ModelInput& input : config.input()) {
    const std::string what = absl::StrCat("input '", absl::CEscape(input.name()), "'");
    if (input.format() != inference::ModelInput::FORMAT_NONE) {
      note(what + ".format", "the image format is informational");
    }
    if (input.is_shape_tensor()) note(what + ".is_shape_tensor", "a TensorRT notion");
    if (input.is_non_linear_format_io()) {
      note(what + ".is_non_linear_format_io", "a TensorRT notion");
    }
  }
  for (const inference::ModelOutput& output : config.output()) {
    const std::string what = absl::StrCat("output '", absl::CEscape(output.name()), "'");
    if (!output.label_filename().empty()) {
      note(what + ".label_filename", "the classification extension is not implemented");
    }
    if (output.is_shape_tensor()) note(what + ".is_shape_tensor", "a TensorRT notion");
    if (output.is_non_linear_format_io()) {
      note(what + ".is_non_linear_format_io", "a TensorRT notion");
    }
  }
  return std::vector<std::string>(lines.begin(), lines.end());
}

// Removes what IgnoredSettings reports (KIND_GPU groups go with the instance groups' completion),
// so that the complete config shows what loopserve applies.
void ClearIgnored(ModelConfig& config) {
  if (config.has_dynamic_batching()) {
    inference::ModelDynamicBatching& batching = *config.mutable_dynamic_batching();
    batching.clear_priority_levels();
    batching.clear_default_priority_level();
    batching.clear_default_queue_policy();
    batching.clear_priority_queue_policy();
  }
  config.clear_runtime();
  config.clear_optimization();
  config.clear_cc_model_filenames();
  config.clear_metric_tags();
  config.clear_model_metrics();
  config.clear_response_cache();
  config.clear_model_operations();
  config.clear_model_repository_agents();
  config.clear_model_transaction_policy();
  for (inference::ModelInstanceGroup& group : *config.mutable_instance_group()) {
    group.clear_gpus();
    group.clear_rate_limiter();
    group.clear_secondary_devices();
    group.clear_profile();
    group.clear_passive();
    group.clear_host_policy();
  }
  for (inference::ModelInput& input : *config.mutable_input()) {
    input.clear_format();
    input.clear_is_shape_tensor();
    input.clear_is_non_linear_format_io();
  }
  for (inference::ModelOutput& output : *config.mutable_output()) {
    output.clear_label_filename();
    output.clear_is_shape_tensor();
    output.clear_is_non_linear_format_io();
  }
}

// At most kShownDims dims, so that a config with 150,000 dims does not make a 300 KB message.
std::string FormatDims(absl::Span<const int64_t> dims) {
  constexpr size_t kShownDims = 16;
  if (dims.size() <= kShownDims) return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
  return absl::StrCat("[", absl::StrJoin(dims.subspan(0, kShownDims), ","), ",... (", dims.size(),
                      " dims)]");
}

template <typename Repeated>
std::vector<int64_t> ToVector(const Repeated& field) {
  return std::vector<int64_t>(field.begin(), field.end());
}

// A file name inside a folder: not empty, no path separator, not "." or "..".
bool IsPlainFileName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of("/\\") == absl::string_view::npos &&
         name.find('\0') == absl::string_view::npos;
}

int64_t CountVariable(absl::Span<const int64_t> dims) {
  return std::count(dims.begin(), dims.end(), int64_t{-1});
}

// Product of the fixed dims (capped far below overflow: dims are checked to be small enough).
int64_t FixedProduct(absl::Span<const int64_t> dims) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d < 0) continue;
    if (d != 0 && product > engine::kMaxElements / d) return engine::kMaxElements + 1;
    product *= d;
  }
  return product;
}

// Dims of a config tensor: each >= -1, and at most kMaxElements elements when fixed.
absl::Status CheckDims(absl::Span<const int64_t> dims, absl::string_view what) {
  for (int64_t d : dims) {
    if (d < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", FormatDims(dims), ": a dim is -1 (variable) or >= 0"));
    }
  }
  if (FixedProduct(dims) > engine::kMaxElements) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", FormatDims(dims), " is too large"));
  }
  return absl::OkStatus();
}

// `dims` (what clients send or receive) and `reshape` (what the model takes or produces) must be
// able to hold the same elements. `inferred` is the side whose single -1 is computed per request
// from the other's element count.
absl::Status CheckReshape(absl::Span<const int64_t> dims, absl::Span<const int64_t> reshape,
                          bool reshape_is_inferred, absl::string_view what) {
  LS_RETURN_IF_ERROR(CheckDims(reshape, absl::StrCat(what, ": reshape")));
  absl::Span<const int64_t> known = reshape_is_inferred ? dims : reshape;
  absl::Span<const int64_t> inferred = reshape_is_inferred ? reshape : dims;
  const char* inferred_name = reshape_is_inferred ? "reshape" : "dims";
  if (CountVariable(inferred) > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", inferred_name, " ", FormatDims(inferred),
                     " may hold at most one -1 (computed per request)"));
  }
  const bool known_varies = CountVariable(known) > 0;
  const int64_t known_product = FixedProduct(known);
  const int64_t inferred_product = FixedProduct(inferred);
  const bool mismatch =
      CountVariable(inferred) == 0
          ? (known_varies || known_product != inferred_product)
          : (!known_varies &&
             (inferred_product == 0 ? known_product != 0 : known_product % inferred_product != 0));
  if (mismatch) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": reshape ", FormatDims(reshape),
                                                   " cannot hold the elements of dims ",
                                                   FormatDims(dims)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseParameter(const inference::ModelParameter& value,
                                       absl::string_view key) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value.string_value()), &n) || n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("parameters '", key, "': string_value '",
                                                   absl::CEscape(value.string_value()),
                                                   "' is not a non-negative integer"));
  }
  return n;
}

bool IsNumericParameter(absl::string_view key) {
  return key == kMaxLoopIterationsParameter || key == kMaxOutputBytesParameter ||
         key == kMaxRequestMemoryBytesParameter;
}

bool IsLoopserveParameter(absl::string_view key) {
  return IsNumericParameter(key) || key == kUnbatchedInputsParameter ||
         key == kOutputBatchAxesParameter || key == kLoopThreadsParameter;
}

absl::StatusOr<engine::LoopThreads> ParseLoopThreadsParameter(
    const inference::ModelParameter& value) {
  absl::StatusOr<engine::LoopThreads> mode =
      engine::ParseLoopThreads(absl::StripAsciiWhitespace(value.string_value()));
  if (!mode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("parameters '", kLoopThreadsParameter,
                                                   "': string_value ", mode.status().message()));
  }
  return mode;
}

// The comma-separated items of a parameter's string value, stripped; empty items kept (the
// caller rejects them).
std::vector<std::string> ParameterItems(const ModelConfig& config, absl::string_view key) {
  std::vector<std::string> items;
  auto it = config.parameters().find(std::string(key));
  if (it == config.parameters().end()) return items;
  for (absl::string_view item : absl::StrSplit(it->second.string_value(), ',')) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

absl::Status CheckPlatform(const ModelConfig& config) {
  const std::string& platform = config.platform();
  const std::string& backend = config.backend();
  if (!platform.empty() && platform != kOnnxPlatform && platform != kOpenVino) {
    return absl::InvalidArgumentError(absl::StrCat("platform '", absl::CEscape(platform),
                                                   "' is not served by loopserve (it serves '",
                                                   kOnnxPlatform, "' and '", kOpenVino, "')"));
  }
  if (!backend.empty() && backend != kOnnxBackend && backend != kOpenVino) {
    return absl::InvalidArgumentError(absl::StrCat("backend '", absl::CEscape(backend),
                                                   "' is not served by loopserve (it serves '",
                                                   kOnnxBackend, "' and '", kOpenVino, "')"));
  }
  if (!platform.empty() && !backend.empty() && (platform == kOpenVino) != (backend == kOpenVino)) {
    return absl::InvalidArgumentError(absl::StrCat("platform '", platform, "' and backend '",
                                                   backend, "' name different engines"));
  }
  return absl::OkStatus();
}

absl::Status CheckDynamicBatching(const ModelConfig& config) {
  if (!config.has_dynamic_batching()) return absl::OkStatus();
  const inference::ModelDynamicBatching& batching = config.dynamic_batching();
  if (config.max_batch_size() <= 0) {
    return absl::InvalidArgumentError(
        "dynamic_batching needs max_batch_size > 0 (the model must take a batch dimension)");
  }
  for (int32_t size : batching.preferred_batch_size()) {
    if (size < 1 || size > config.max_batch_size()) {
      return absl::InvalidArgumentError(absl::StrCat("dynamic_batching.preferred_batch_size ", size,
                                                     " is outside [1, ", config.max_batch_size(),
                                                     "] (max_batch_size)"));
    }
  }
  const uint64_t levels = batching.priority_levels();
  if (levels == 0) {
    if (batching.default_priority_level() != 0 || !batching.priority_queue_policy().empty()) {
      return absl::InvalidArgumentError(
          "dynamic_batching: default_priority_level and priority_queue_policy need "
          "priority_levels > 0");
    }
    return absl::OkStatus();
  }
  if (batching.default_priority_level() < 1 || batching.default_priority_level() > levels) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic_batching.default_priority_level ", batching.default_priority_level(),
                     " is outside [1, ", levels, "] (priority_levels)"));
  }
  for (const auto& [level, policy] : batching.priority_queue_policy()) {
    if (level < 1 || level > levels) {
      return absl::InvalidArgumentError(absl::StrCat("dynamic_batching.priority_queue_policy key ",
                                                     level, " is outside [1, ", levels,
                                                     "] (priority_levels)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckWarmup(const ModelConfig& config) {
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < config.model_warmup_size(); ++i) {
    const inference::ModelWarmup& sample = config.model_warmup(i);
    const std::string what =
        sample.name().empty() ? absl::StrCat("model_warmup[", i, "]")
                              : absl::StrCat("model_warmup '", absl::CEscape(sample.name()), "'");
    if (sample.name().empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no name"));
    if (!names.insert(sample.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": name given twice"));
    }
    const int64_t batch = std::max<uint32_t>(sample.batch_size(), 1);
    const int64_t max_batch = std::max(config.max_batch_size(), 1);
    if (batch > max_batch) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": batch_size ", batch, " is above max_batch_size ", config.max_batch_size()));
    }
    // std::map for a deterministic order of messages.
    const std::map<std::string, inference::ModelWarmup::Input> inputs(sample.inputs().begin(),
                                                                      sample.inputs().end());
    for (const auto& [name, input] : inputs) {
      const std::string input_what = absl::StrCat(what, ": input '", absl::CEscape(name), "'");
      if (input.data_type() == inference::TYPE_INVALID) {
        return absl::InvalidArgumentError(absl::StrCat(input_what, ": no data_type"));
      }
      for (int64_t d : input.dims()) {
        if (d < 0) {
          return absl::InvalidArgumentError(absl::StrCat(input_what, ": dims ",
                                                         FormatDims(ToVector(input.dims())),
                                                         " must be concrete (no -1)"));
        }
      }
      LS_RETURN_IF_ERROR(CheckDims(ToVector(input.dims()), absl::StrCat(input_what, ": dims")));
      switch (input.input_data_type_case()) {
        case inference::ModelWarmup::Input::kZeroData:
        case inference::ModelWarmup::Input::kRandomData:
          break;
        case inference::ModelWarmup::Input::kInputDataFile:
          if (!IsPlainFileName(input.input_data_file())) {
            return absl::InvalidArgumentError(absl::StrCat(
                input_what, ": input_data_file '", absl::CEscape(input.input_data_file()),
                "' must be a file name in the model's warmup/ folder"));
          }
          break;
        case inference::ModelWarmup::Input::INPUT_DATA_TYPE_NOT_SET:
          return absl::InvalidArgumentError(
              absl::StrCat(input_what, ": no data (zero_data, random_data or input_data_file)"));
      }
    }
  }
  return absl::OkStatus();
}

// The checks of ParseModelConfig that follow a successful parse.
absl::Status CheckParsed(ParsedModelConfig& parsed, absl::string_view model_name) {
  ModelConfig& config = parsed.config;
  if (!config.name().empty() && config.name() != model_name) {
    return absl::InvalidArgumentError(absl::StrCat("name '", absl::CEscape(config.name()),
                                                   "' differs from the model's name '", model_name,
                                                   "'"));
  }
  LS_RETURN_IF_ERROR(CheckPlatform(config));
  if (!config.default_model_filename().empty() &&
      !IsPlainFileName(config.default_model_filename())) {
    return absl::InvalidArgumentError(absl::StrCat("default_model_filename '",
                                                   absl::CEscape(config.default_model_filename()),
                                                   "' must be a file name in the version folder"));
  }
  if (config.backend() == kOnnxBackend || config.platform() == kOnnxPlatform) {
    if (absl::EndsWith(config.default_model_filename(), ".xml")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "default_model_filename '", config.default_model_filename(),
          "' is an OpenVINO IR, which ONNX Runtime's platform cannot load (use platform: \"",
          kOpenVino, "\")"));
    }
  }
  if (config.max_batch_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size ", config.max_batch_size(), " must be >= 0"));
  }
  if (config.version_policy().has_specific()) {
    for (int64_t v : config.version_policy().specific().versions()) {
      if (v <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("version_policy.specific lists version ", v, "; versions are positive"));
      }
    }
  }
  LS_RETURN_IF_ERROR(RejectUnsupported(config));

  absl::flat_hash_set<std::string> names;
  for (const inference::ModelInput& input : config.input()) {
    const std::string what = absl::StrCat("input '", absl::CEscape(input.name()), "'");
    if (input.name().empty()) return absl::InvalidArgumentError("an input has no name");
    if (!names.insert(input.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": declared twice"));
    }
    LS_RETURN_IF_ERROR(CheckDims(ToVector(input.dims()), absl::StrCat(what, ": dims")));
    if (input.has_reshape()) {
      LS_RETURN_IF_ERROR(CheckReshape(ToVector(input.dims()), ToVector(input.reshape().shape()),
                                      /*reshape_is_inferred=*/true, what));
    }
  }
  names.clear();
  for (const inference::ModelOutput& output : config.output()) {
    const std::string what = absl::StrCat("output '", absl::CEscape(output.name()), "'");
    if (output.name().empty()) return absl::InvalidArgumentError("an output has no name");
    if (!names.insert(output.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": declared twice"));
    }
    LS_RETURN_IF_ERROR(CheckDims(ToVector(output.dims()), absl::StrCat(what, ": dims")));
    if (output.has_reshape()) {
      LS_RETURN_IF_ERROR(CheckReshape(ToVector(output.dims()), ToVector(output.reshape().shape()),
                                      /*reshape_is_inferred=*/false, what));
    }
  }

  for (int i = 0; i < config.instance_group_size(); ++i) {
    const inference::ModelInstanceGroup& group = config.instance_group(i);
    const std::string what = absl::StrCat("instance_group[", i, "]");
    if (group.count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".count ", group.count(), " must be >= 0 (0 = the default)"));
    }
  }

  const std::map<std::string, inference::ModelParameter> parameters(config.parameters().begin(),
                                                                    config.parameters().end());
  for (const auto& [key, value] : parameters) {
    if (IsNumericParameter(key)) {
      LS_RETURN_IF_ERROR(ParseParameter(value, key).status());
    } else if (key == kLoopThreadsParameter) {
      LS_RETURN_IF_ERROR(ParseLoopThreadsParameter(value).status());
    } else if (!IsLoopserveParameter(key)) {
      parsed.ignored.push_back(
          absl::StrCat("parameters '", absl::CEscape(key),
                       "' ignored: not a loopserve setting (loopserve reads ",
                       kMaxLoopIterationsParameter, ", ", kMaxOutputBytesParameter, ", ",
                       kMaxRequestMemoryBytesParameter, ", ", kLoopThreadsParameter, ", ",
                       kUnbatchedInputsParameter, ", ", kOutputBatchAxesParameter, ")"));
    }
  }
  LS_RETURN_IF_ERROR(ReadBatchLayout(config).status());
  LS_RETURN_IF_ERROR(CheckDynamicBatching(config));
  LS_RETURN_IF_ERROR(CheckSequenceBatching(config));
  return CheckWarmup(config);
}

// ---- Completion against the model ----

// The Triton type name of an engine type, for messages ("TYPE_FP32").
std::string ConfigTypeName(engine::DataType type) {
  return inference::DataType_Name(DataTypeToConfig(type));
}

// Compares the model-side dims a config declares (without the batch dim) with the model's dims
// (with it at `batch_axis` when >= 0). `field` names what was declared ("dims", "reshape");
// `is_input` says which parameter a message about a missing batch dim points to.
absl::Status CheckAgainstModel(absl::string_view what, bool is_input, absl::string_view field,
                               absl::Span<const int64_t> declared,
                               const std::optional<std::vector<int64_t>>& model_dims,
                               int batch_axis) {
  if (!model_dims.has_value()) return absl::OkStatus();  // the model does not say
  std::vector<int64_t> model_without_batch = *model_dims;
  absl::Span<const int64_t> model(*model_dims);
  if (batch_axis >= 0) {
    if (static_cast<int>(model.size()) <= batch_axis || model[batch_axis] != -1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": max_batch_size > 0 needs a variable batch dim ",
                       batch_axis == 0 ? "first" : absl::StrCat("at axis ", batch_axis),
                       ", but the model's dims are ", FormatDims(model),
                       is_input ? absl::StrCat(" (list an input without one in parameters '",
                                               kUnbatchedInputsParameter, "')")
                                : absl::StrCat(" (give an output's batch axis in parameters '",
                                               kOutputBatchAxesParameter, "')")));
    }
    model_without_batch.erase(model_without_batch.begin() + batch_axis);
    model = model_without_batch;
  }
  const absl::string_view without_batch = batch_axis >= 0 ? " (without the batch dim)" : "";
  if (declared.size() != model.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", field, " ", FormatDims(declared), " have rank ", declared.size(),
                     ", the model's ", FormatDims(model), " rank ", model.size(), without_batch));
  }
  for (size_t i = 0; i < declared.size(); ++i) {
    if (model[i] != -1 && declared[i] != model[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", field, " ", FormatDims(declared), " do not match the model's ",
          FormatDims(model), " (dim ", i, ": ", declared[i], " vs ", model[i], ")", without_batch));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDataType(absl::string_view what, inference::DataType declared,
                           engine::DataType model) {
  if (declared == inference::TYPE_INVALID || model == engine::DataType::kUndefined) {
    return absl::OkStatus();
  }
  if (DataTypeFromConfig(declared) != model) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": data_type ", inference::DataType_Name(declared),
                     " does not match the model's ", ConfigTypeName(model)));
  }
  return absl::OkStatus();
}

// The model's dims without the batch dim at `batch_axis` (-1: none; the caller has checked it is
// variable);
// std::nullopt for an unknown rank.
std::optional<std::vector<int64_t>> ConfigDims(const engine::TensorSpec& spec, int batch_axis) {
  if (!spec.type.dims.has_value()) return std::nullopt;
  std::vector<int64_t> dims = *spec.type.dims;
  for (int64_t& d : dims) d = d < 0 ? -1 : d;
  if (batch_axis >= 0 && static_cast<int>(dims.size()) > batch_axis) {
    dims.erase(dims.begin() + batch_axis);
  }
  return dims;
}

bool IsSequence(const engine::TensorSpec& spec) {
  return spec.type.kind == engine::ValueKind::kSequence ||
         (spec.type.kind == engine::ValueKind::kOptional &&
          spec.type.optional_of == engine::ValueKind::kSequence);
}

std::string ListNames(const std::vector<engine::TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const engine::TensorSpec& spec : specs) names.push_back(spec.name);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

int FindSpec(const std::vector<engine::TensorSpec>& specs, absl::string_view name) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// Checks the declared inputs (Proto = ModelInput) or outputs (ModelOutput) against the model's
// `specs` and appends the ones the config leaves out. `kind` is "input" or "output".
// `batch_axis` gives each tensor's batch axis by name (-1: none).
template <typename Proto>
absl::Status CompleteTensors(absl::string_view kind, const std::vector<engine::TensorSpec>& specs,
                             absl::FunctionRef<int(absl::string_view)> batch_axis,
                             const CompletionOptions& options,
                             const std::vector<std::string>& server_fed,
                             google::protobuf::RepeatedPtrField<Proto>& tensors) {
  constexpr bool kIsInput = std::is_same_v<Proto, inference::ModelInput>;
  std::vector<bool> declared(specs.size(), false);
  for (const std::string& name : server_fed) {
    const int index = FindSpec(specs, name);
    if (index >= 0) declared[index] = true;  // the sequence batcher's, never the client's
  }
  for (Proto& tensor : tensors) {
    const std::string what = absl::StrCat(kind, " '", absl::CEscape(tensor.name()), "'");
    if (std::find(server_fed.begin(), server_fed.end(), tensor.name()) != server_fed.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": declared both here and in sequence_batching (a control or state ",
                       kind, " is the server's: leave it out of the config's ", kind, "s)"));
    }
    const int index = FindSpec(specs, tensor.name());
    if (index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the model has no such ", kind, " (it has ", ListNames(specs), ")"));
    }
    declared[index] = true;
    const engine::TensorSpec& spec = specs[index];
    if (IsSequence(spec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the model's ", kind, " is a sequence, which a config cannot declare"));
    }
    LS_RETURN_IF_ERROR(CheckDataType(what, tensor.data_type(), spec.type.dtype));
    if (tensor.data_type() == inference::TYPE_INVALID) {
      if (!options.auto_complete) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": no data_type"));
      }
      tensor.set_data_type(DataTypeToConfig(spec.type.dtype));
    }
    if (tensor.has_reshape()) {
      LS_RETURN_IF_ERROR(CheckAgainstModel(what, kIsInput, "reshape",
                                           ToVector(tensor.reshape().shape()), spec.type.dims,
                                           batch_axis(spec.name)));
    } else {
      LS_RETURN_IF_ERROR(CheckAgainstModel(what, kIsInput, "dims", ToVector(tensor.dims()),
                                           spec.type.dims, batch_axis(spec.name)));
    }
    if constexpr (kIsInput) {
      if (tensor.optional() && spec.type.kind != engine::ValueKind::kOptional) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": optional: true, but the model requires this input"));
      }
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const engine::TensorSpec& spec = specs[i];
    if (declared[i] || IsSequence(spec)) continue;
    const std::string what = absl::StrCat(kind, " '", spec.name, "'");
    if (!options.auto_complete) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": not declared (auto-complete is disabled: declare every input and output)"));
    }
    // A batching config needs the batch dim on every tensor, declared or not.
    const int axis = batch_axis(spec.name);
    const std::vector<int64_t> dims = ConfigDims(spec, axis).value_or(std::vector<int64_t>());
    LS_RETURN_IF_ERROR(CheckAgainstModel(what, kIsInput, "dims", dims, spec.type.dims, axis));
    Proto* tensor = tensors.Add();
    tensor->set_name(spec.name);
    tensor->set_data_type(DataTypeToConfig(spec.type.dtype));
    for (int64_t d : dims) tensor->add_dims(d);
    if constexpr (kIsInput) tensor->set_optional(spec.type.kind == engine::ValueKind::kOptional);
  }
  return absl::OkStatus();
}

// Warm-up samples against the complete inputs: declared names, same data_type, admitted dims,
// every required input present.
absl::Status CheckWarmupAgainstInputs(const ModelConfig& config) {
  for (const inference::ModelWarmup& sample : config.model_warmup()) {
    const std::string what = absl::StrCat("model_warmup '", absl::CEscape(sample.name()), "'");
    for (const auto& [name, input] : sample.inputs()) {
      const std::string input_what = absl::StrCat(what, ": input '", absl::CEscape(name), "'");
      const inference::ModelInput* declared = nullptr;
      for (const inference::ModelInput& in : config.input()) {
        if (in.name() == name) declared = &in;
      }
      if (declared == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(input_what, ": the model has no such input"));
      }
      if (declared->data_type() != inference::TYPE_INVALID &&
          input.data_type() != declared->data_type()) {
        return absl::InvalidArgumentError(absl::StrCat(
            input_what, ": data_type ", inference::DataType_Name(input.data_type()),
            " differs from the input's ", inference::DataType_Name(declared->data_type())));
      }
      const std::vector<int64_t> dims = ToVector(input.dims());
      const std::vector<int64_t> admitted = ToVector(declared->dims());
      bool ok = dims.size() == admitted.size();
      for (size_t i = 0; ok && i < dims.size(); ++i) {
        ok = admitted[i] == -1 || admitted[i] == dims[i];
      }
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat(input_what, ": dims ", FormatDims(dims),
                                                       " do not fit the input's dims ",
                                                       FormatDims(admitted)));
      }
    }
    for (const inference::ModelInput& in : config.input()) {
      if (!in.optional() && sample.inputs().count(in.name()) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": input '", in.name(), "' missing (every required input needs warm-up data)"));
      }
    }
  }
  return absl::OkStatus();
}

void CompleteInstanceGroups(const std::string& name, int default_count, ModelConfig& config) {
  std::vector<inference::ModelInstanceGroup> groups;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    if (group.kind() == inference::ModelInstanceGroup::KIND_GPU) continue;
    inference::ModelInstanceGroup cpu;
    cpu.set_name(group.name().empty() ? absl::StrCat(name, "_", groups.size()) : group.name());
    cpu.set_kind(inference::ModelInstanceGroup::KIND_CPU);
    cpu.set_count(group.count() > 0 ? group.count() : default_count);
    groups.push_back(std::move(cpu));
  }
  if (groups.empty()) {
    inference::ModelInstanceGroup cpu;
    cpu.set_name(absl::StrCat(name, "_0"));
    cpu.set_kind(inference::ModelInstanceGroup::KIND_CPU);
    cpu.set_count(default_count);
    groups.push_back(std::move(cpu));
  }
  config.clear_instance_group();
  for (inference::ModelInstanceGroup& group : groups) *config.add_instance_group() = group;
}

// Replaces the one -1 of `target` (if any; its other dims are >= 0) so that it holds `elements`.
// False when the elements do not fit.
bool ResolveShape(int64_t elements, engine::Shape& target) {
  int unknown = -1;
  int64_t product = 1;
  for (int i = 0; i < target.rank(); ++i) {
    if (target[i] < 0) {
      unknown = i;
    } else {
      product *= target[i];
    }
  }
  if (unknown < 0) return product == elements;
  if (product == 0) {
    if (elements != 0) return false;
    target[unknown] = 0;
    return true;
  }
  if (elements % product != 0) return false;
  target[unknown] = elements / product;
  return true;
}

}  // namespace

absl::StatusOr<ParsedModelConfig> ParseModelConfig(absl::string_view text,
                                                   absl::string_view model_name) {
  const std::string prefix = absl::StrCat("model '", model_name, "': config.pbtxt: ");
  ParsedModelConfig parsed;
  parsed.model_name = std::string(model_name);
  parsed.from_file = true;
  ErrorCollector errors;
  LS_RETURN_IF_ERROR(CheckConfigNesting(text, ConfigSyntax::kProtobufText,
                                        absl::StrCat("model '", model_name, "': config.pbtxt")));
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.SetRecursionLimit(kMaxConfigNesting);  // CheckConfigNesting's bound, in case it missed
  if (!parser.ParseFromString(std::string(text), &parsed.config)) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, errors.Errors()));
  }
  parsed.ignored = IgnoredSettings(parsed.config);
  absl::Status checked = CheckParsed(parsed, model_name);
  if (!checked.ok()) return Annotate(checked, prefix);
  return parsed;
}

absl::StatusOr<ParsedModelConfig> ReadModelConfig(const std::string& model_dir,
                                                  absl::string_view model_name) {
  absl::StatusOr<std::string> text =
      ReadRepositoryFile(model_dir, (fs::path(model_dir) / "config.pbtxt").string(),
                         kMaxModelConfigBytes, "config.pbtxt");
  if (absl::IsNotFound(text.status())) {
    ParsedModelConfig defaults;
    defaults.model_name = std::string(model_name);
    return defaults;
  }
  if (!text.ok()) return Annotate(text.status(), absl::StrCat("model '", model_name, "': "));
  return ParseModelConfig(*text, model_name);
}

ModelFormat ConfigFormat(const inference::ModelConfig& config) {
  if (config.platform() == kOpenVino || config.backend() == kOpenVino)
    return ModelFormat::kOpenVino;
  if (config.platform() == kOnnxPlatform || config.backend() == kOnnxBackend) {
    return ModelFormat::kOnnx;
  }
  return ModelFormat::kUnknown;
}

absl::StatusOr<std::string> FindModelFile(const std::string& version_dir,
                                          const inference::ModelConfig& config, bool any_name) {
  // Messages reach clients (RepositoryIndex, ModelReady): the folder by its name only.
  const std::string folder = fs::path(version_dir).filename().string();
  std::error_code ec;
  std::vector<std::string> names;
  if (!config.default_model_filename().empty()) {
    names.push_back(config.default_model_filename());
  } else if (ConfigFormat(config) == ModelFormat::kOnnx) {
    names.push_back("model.onnx");
  } else if (ConfigFormat(config) == ModelFormat::kOpenVino) {
    names.push_back("model.xml");
  } else {
    names = {"model.onnx", "model.xml"};
  }
  for (const std::string& name : names) {
    const fs::path path = fs::path(version_dir) / name;
    if (fs::is_regular_file(path, ec)) return path.string();
  }
  if (any_name && config.default_model_filename().empty()) {
    std::vector<std::string> found;
    for (fs::directory_iterator it(version_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string file = it->path().filename().string();
      const bool onnx = absl::EndsWith(file, ".onnx");
      const bool xml = absl::EndsWith(file, ".xml");
      const ModelFormat format = ConfigFormat(config);
      if (!it->is_regular_file(ec) || !(onnx || xml)) continue;
      if ((format == ModelFormat::kOnnx && !onnx)) continue;
      found.push_back(it->path().string());
    }
    std::sort(found.begin(), found.end());
    if (found.size() == 1) return found[0];
    if (found.size() > 1) {
      std::vector<std::string> files;
      for (const std::string& path : found) files.push_back(fs::path(path).filename().string());
      return absl::InvalidArgumentError(absl::StrCat("version folder ", folder,
                                                     " holds more than one model (",
                                                     absl::StrJoin(files, ", "), ")"));
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "version folder ", folder, " contains no ", absl::StrJoin(names, " or "),
      any_name && config.default_model_filename().empty() ? " (nor any *.onnx or *.xml)" : ""));
}

absl::StatusOr<inference::ModelConfig> CompleteModelConfig(const ParsedModelConfig& parsed,
                                                           const engine::Model& model,
                                                           absl::string_view model_file,
                                                           const CompletionOptions& options) {
  ModelConfig config = parsed.config;
  const std::string file_name = fs::path(std::string(model_file)).filename().string();
  const bool is_xml = absl::EndsWith(model_file, ".xml");
  absl::Status status = [&]() -> absl::Status {
    if (!options.auto_complete) {
      if (!parsed.from_file) {
        return absl::InvalidArgumentError(
            "missing (auto-complete is disabled: every model needs a complete config.pbtxt)");
      }
      if (config.platform().empty() && config.backend().empty()) {
        return absl::InvalidArgumentError("no platform or backend (auto-complete is disabled)");
      }
    }
    ClearIgnored(config);
    if (config.platform().empty() && config.backend().empty()) {
      config.set_platform(is_xml ? kOpenVino : kOnnxPlatform);
    }
    if (config.platform().empty()) {
      config.set_platform(config.backend() == kOpenVino ? kOpenVino : kOnnxPlatform);
    }
    if (config.backend().empty()) {
      config.set_backend(config.platform() == kOpenVino ? kOpenVino : kOnnxBackend);
    }
    if (is_xml && config.platform() != kOpenVino) {
      return absl::InvalidArgumentError(absl::StrCat(
          "platform '", config.platform(), "' cannot load the OpenVINO IR '", file_name, "'"));
    }
    config.set_name(parsed.model_name);
    config.set_default_model_filename(file_name);
    if (config.version_policy().policy_choice_case() ==
        inference::ModelVersionPolicy::POLICY_CHOICE_NOT_SET) {
      config.mutable_version_policy()->mutable_latest()->set_num_versions(1);
    } else if (config.version_policy().has_latest() &&
               config.version_policy().latest().num_versions() == 0) {
      config.mutable_version_policy()->mutable_latest()->set_num_versions(1);
    }
    LS_ASSIGN_OR_RETURN(const BatchLayout layout, ReadBatchLayout(config));
    for (const std::string& name : layout.unbatched_inputs) {
      if (FindSpec(model.inputs(), name) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameters '", kUnbatchedInputsParameter, "': the model has no input '",
                         name, "' (it has ", ListNames(model.inputs()), ")"));
      }
    }
    for (const auto& [name, axis] : layout.output_axes) {
      if (FindSpec(model.outputs(), name) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameters '", kOutputBatchAxesParameter, "': the model has no output '",
                         name, "' (it has ", ListNames(model.outputs()), ")"));
      }
    }
    const bool batching = config.max_batch_size() > 0;
    LS_RETURN_IF_ERROR(CheckSequenceAgainstModel(config, model));
    LS_RETURN_IF_ERROR(CompleteTensors(
        "input", model.inputs(),
        [&](absl::string_view name) { return batching && layout.InputBatched(name) ? 0 : -1; },
        options, SequenceInputNames(config), *config.mutable_input()));
    LS_RETURN_IF_ERROR(CompleteTensors(
        "output", model.outputs(),
        [&](absl::string_view name) { return batching ? layout.OutputAxis(name) : -1; }, options,
        SequenceOutputNames(config), *config.mutable_output()));
    LS_RETURN_IF_ERROR(CheckWarmupAgainstInputs(config));
    CompleteInstanceGroups(config.name(), std::max(options.default_instance_count, 1), config);
    auto& parameters = *config.mutable_parameters();
    parameters[kMaxLoopIterationsParameter].set_string_value(absl::StrCat(
        ParameterOr(config, kMaxLoopIterationsParameter, options.max_loop_iterations)));
    parameters[kMaxOutputBytesParameter].set_string_value(
        absl::StrCat(ParameterOr(config, kMaxOutputBytesParameter, options.max_output_bytes)));
    parameters[kMaxRequestMemoryBytesParameter].set_string_value(absl::StrCat(
        ParameterOr(config, kMaxRequestMemoryBytesParameter, options.max_request_memory_bytes)));
    parameters[kLoopThreadsParameter].set_string_value(
        engine::LoopThreadsName(LoopThreadsOr(config, options.loop_threads)));
    return absl::OkStatus();
  }();
  if (!status.ok()) return Annotate(status, "config.pbtxt: ");
  return config;
}

bool BatchLayout::InputBatched(absl::string_view name) const {
  return std::find(unbatched_inputs.begin(), unbatched_inputs.end(), name) ==
         unbatched_inputs.end();
}

int BatchLayout::OutputAxis(absl::string_view name) const {
  for (const auto& [output, axis] : output_axes) {
    if (output == name) return axis;
  }
  return 0;
}

absl::StatusOr<BatchLayout> ReadBatchLayout(const inference::ModelConfig& config) {
  BatchLayout layout;
  const std::vector<std::string> unbatched = ParameterItems(config, kUnbatchedInputsParameter);
  const std::vector<std::string> axes = ParameterItems(config, kOutputBatchAxesParameter);
  if ((!unbatched.empty() || !axes.empty()) && config.max_batch_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters '", unbatched.empty() ? kOutputBatchAxesParameter : kUnbatchedInputsParameter,
        "' needs max_batch_size > 0 (without batching no tensor has a batch dim)"));
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& name : unbatched) {
    if (name.empty() || !seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameters '", kUnbatchedInputsParameter,
          "': ", name.empty() ? "an empty name" : absl::StrCat("'", absl::CEscape(name), "' twice"),
          " (expected comma-separated input names)"));
    }
    layout.unbatched_inputs.push_back(name);
  }
  seen.clear();
  for (const std::string& item : axes) {
    const size_t colon = item.rfind(':');
    int axis = -1;
    std::string name = colon == std::string::npos ? "" : item.substr(0, colon);
    absl::StripAsciiWhitespace(&name);
    if (colon == std::string::npos || name.empty() ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(item.substr(colon + 1)), &axis) || axis < 0 ||
        axis > 64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameters '", kOutputBatchAxesParameter, "': '", absl::CEscape(item),
          "' is not NAME:AXIS with an axis from 0 to 64 (expected e.g. \"h_seq:1,y:0\")"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("parameters '", kOutputBatchAxesParameter,
                                                     "': '", absl::CEscape(name), "' twice"));
    }
    layout.output_axes.emplace_back(std::move(name), axis);
  }
  return layout;
}

int64_t ParameterOr(const inference::ModelConfig& config, absl::string_view key, int64_t fallback) {
  auto it = config.parameters().find(std::string(key));
  if (it == config.parameters().end()) return fallback;
  absl::StatusOr<int64_t> value = ParseParameter(it->second, key);
  return value.ok() && *value > 0 ? *value : fallback;
}

engine::LoopThreads LoopThreadsOr(const inference::ModelConfig& config,
                                  engine::LoopThreads fallback) {
  auto it = config.parameters().find(kLoopThreadsParameter);
  if (it == config.parameters().end()) return fallback;
  return ParseLoopThreadsParameter(it->second).value_or(fallback);
}

int InstanceCount(const inference::ModelConfig& config) {
  int64_t count = 0;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    if (group.kind() != inference::ModelInstanceGroup::KIND_GPU)
      count += std::max(group.count(), 0);
  }
  return static_cast<int>(std::min<int64_t>(count, std::numeric_limits<int>::max()));
}

// ---- ModelIo ----

ModelIo ModelIo::Build(const inference::ModelConfig& config, const engine::Model& model) {
  ModelIo io;
  io.max_batch_size_ = config.max_batch_size();
  io.input_by_model_index_.assign(model.inputs().size(), -1);
  io.output_by_model_index_.assign(model.outputs().size(), -1);
  // CompleteModelConfig has checked the layout.
  const BatchLayout layout = ReadBatchLayout(config).value_or(BatchLayout());
  // Client-side dims with the batch dim at `axis` (-1: none); none when the model's rank is
  // unknown and the config gives no dims (auto-complete wrote none).
  auto full = [&](absl::Span<const int64_t> dims, const engine::TensorSpec& spec,
                  int axis) -> std::optional<std::vector<int64_t>> {
    if (!spec.type.dims.has_value() && dims.empty()) return std::nullopt;
    std::vector<int64_t> out(dims.begin(), dims.end());
    if (axis >= 0) out.insert(out.begin() + std::min<size_t>(axis, out.size()), -1);
    return out;
  };
  for (const inference::ModelInput& input : config.input()) {
    const int index = FindSpec(model.inputs(), input.name());
    if (index < 0) continue;  // CompleteModelConfig has rejected this
    Tensor t;
    t.name = input.name();
    t.dtype = DataTypeFromConfig(input.data_type());
    t.model_index = index;
    t.optional = input.optional();
    t.batch_axis = io.max_batch_size_ > 0 && layout.InputBatched(t.name) ? 0 : -1;
    t.dims = full(input.dims(), model.inputs()[index], t.batch_axis);
    if (input.has_reshape()) {
      t.reshape = full(input.reshape().shape(), model.inputs()[index], t.batch_axis);
    }
    io.input_by_model_index_[index] = static_cast<int>(io.inputs_.size());
    io.inputs_.push_back(std::move(t));
  }
  for (const inference::ModelOutput& output : config.output()) {
    const int index = FindSpec(model.outputs(), output.name());
    if (index < 0) continue;
    Tensor t;
    t.name = output.name();
    t.dtype = DataTypeFromConfig(output.data_type());
    t.model_index = index;
    t.batch_axis = io.max_batch_size_ > 0 ? layout.OutputAxis(t.name) : -1;
    t.dims = full(output.dims(), model.outputs()[index], t.batch_axis);
    if (output.has_reshape()) {
      t.reshape = full(output.reshape().shape(), model.outputs()[index], t.batch_axis);
      io.any_output_reshape_ = true;
    }
    io.output_by_model_index_[index] = static_cast<int>(io.outputs_.size());
    io.outputs_.push_back(std::move(t));
  }
  return io;
}

int ModelIo::InputBatchAxis(int model_index) const {
  if (model_index < 0 || model_index >= static_cast<int>(input_by_model_index_.size())) return -1;
  const int i = input_by_model_index_[model_index];
  return i < 0 ? -1 : inputs_[i].batch_axis;
}

int ModelIo::OutputBatchAxis(int model_index) const {
  if (model_index < 0 || model_index >= static_cast<int>(output_by_model_index_.size())) return -1;
  const int i = output_by_model_index_[model_index];
  return i < 0 ? -1 : outputs_[i].batch_axis;
}

absl::Status ModelIo::AdaptInputs(std::vector<engine::Value>& inputs) const {
  int64_t batch = -1;  // the batch size of the first batched input
  const std::string* batch_input = nullptr;
  for (size_t i = 0; i < inputs.size() && i < input_by_model_index_.size(); ++i) {
    if (input_by_model_index_[i] < 0) continue;
    const Tensor& spec = inputs_[input_by_model_index_[i]];
    engine::Value& value = inputs[i];
    if (value.is_none()) {
      if (spec.optional) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("input '", spec.name, "': missing from the request"));
    }
    if (!value.is_tensor()) continue;
    engine::Tensor& tensor = value.mutable_tensor();
    if (spec.dtype != engine::DataType::kUndefined && tensor.dtype() != spec.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", spec.name, "': ", engine::DataTypeName(tensor.dtype()),
                       " does not match the config's data_type ", ConfigTypeName(spec.dtype)));
    }
    const bool batched = spec.batch_axis == 0;
    // A scalar sent as [1], or a [1] sent as a scalar, as ONNX Runtime accepts (the engine does the
    // same against the model's own declaration).
    if (!batched && spec.dims.has_value() &&
        engine::IsScalarLikeMatch(tensor.shape(), *spec.dims)) {
      tensor.Reshape(engine::Shape(absl::MakeConstSpan(*spec.dims)));
    }
    const engine::Shape& shape = tensor.shape();
    // Dims unknown (a model input of unknown rank): the batch dim is still checked.
    bool ok = !spec.dims.has_value() || shape.rank() == static_cast<int>(spec.dims->size());
    for (int d = 0; ok && spec.dims.has_value() && d < shape.rank(); ++d) {
      ok = (*spec.dims)[d] == -1 || (*spec.dims)[d] == shape[d];
    }
    if (ok && batched) ok = shape.rank() >= 1 && shape[0] >= 1 && shape[0] <= max_batch_size_;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", spec.name, "': shape ", shape.ToString(), " does not match the config's ",
          spec.dims.has_value() ? FormatDims(*spec.dims) : "dims",
          batched ? absl::StrCat(" (batch dim 1 to ", max_batch_size_, ")") : ""));
    }
    if (batched) {
      if (batch_input != nullptr && shape[0] != batch) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", spec.name, "': batch size ", shape[0], " differs from input '", *batch_input,
            "''s ", batch, " (every batched input has the same first dim)"));
      }
      batch = shape[0];
      batch_input = &spec.name;
    }
    if (!spec.reshape.has_value() || !spec.dims.has_value()) continue;
    engine::Shape target(absl::MakeConstSpan(*spec.reshape));
    if (batched) target[0] = shape[0];
    if (!ResolveShape(shape.NumElements(), target)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", spec.name, "': shape ", shape.ToString(),
                       " cannot be reshaped to the model's ", FormatDims(*spec.reshape)));
    }
    tensor.Reshape(target);
  }
  return absl::OkStatus();
}

absl::Status ModelIo::AdaptOutputs(std::vector<engine::Value>& outputs) const {
  if (!any_output_reshape_) return absl::OkStatus();
  for (const Tensor& spec : outputs_) {
    if (!spec.reshape.has_value() || !spec.dims.has_value()) continue;
    if (spec.model_index < 0 || spec.model_index >= static_cast<int>(outputs.size())) continue;
    engine::Value& value = outputs[spec.model_index];
    if (!value.is_tensor()) continue;
    engine::Tensor& tensor = value.mutable_tensor();
    engine::Shape target(absl::MakeConstSpan(*spec.dims));
    const int axis = spec.batch_axis;
    if (axis >= 0 && axis < tensor.shape().rank() && axis < target.rank()) {
      target[axis] = tensor.shape()[axis];
    }
    if (!ResolveShape(tensor.shape().NumElements(), target)) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", spec.name, "': the model's shape ", tensor.shape().ToString(),
                       " cannot be reshaped to the config's dims ", FormatDims(*spec.dims)));
    }
    tensor.Reshape(target);
  }
  return absl::OkStatus();
}

// ---- Data types ----

namespace {

constexpr std::pair<inference::DataType, engine::DataType> kDataTypes[] = {
    {inference::TYPE_BOOL, engine::DataType::kBool},
    {inference::TYPE_UINT8, engine::DataType::kUint8},
    {inference::TYPE_UINT16, engine::DataType::kUint16},
    {inference::TYPE_UINT32, engine::DataType::kUint32},
    {inference::TYPE_UINT64, engine::DataType::kUint64},
    {inference::TYPE_INT8, engine::DataType::kInt8},
    {inference::TYPE_INT16, engine::DataType::kInt16},
    {inference::TYPE_INT32, engine::DataType::kInt32},
    {inference::TYPE_INT64, engine::DataType::kInt64},
    {inference::TYPE_FP16, engine::DataType::kFloat16},
    {inference::TYPE_FP32, engine::DataType::kFloat32},
    {inference::TYPE_FP64, engine::DataType::kFloat64},
    {inference::TYPE_BF16, engine::DataType::kBFloat16},
    {inference::TYPE_STRING, engine::DataType::kString},
};

}  // namespace

engine::DataType DataTypeFromConfig(inference::DataType type) {
  for (const auto& [config, engine_type] : kDataTypes) {
    if (config == type) return engine_type;
  }
  return engine::DataType::kUndefined;
}

inference::DataType DataTypeToConfig(engine::DataType type) {
  for (const auto& [config, engine_type] : kDataTypes) {
    if (engine_type == type) return config;
  }
  return inference::TYPE_INVALID;
}

// ---- sequence_batching ----

namespace {

using Control = inference::ModelSequenceBatching::Control;

std::string KindName(Control::Kind kind) { return Control::Kind_Name(kind); }

// The element type a control input has in the model.
inference::DataType ControlType(const Control& control) {
  if (control.kind() == Control::CONTROL_SEQUENCE_CORRID) return control.data_type();
  if (control.fp32_false_true_size() > 0) return inference::TYPE_FP32;
  if (control.bool_false_true_size() > 0) return inference::TYPE_BOOL;
  return inference::TYPE_INT32;
}

}  // namespace

std::vector<std::string> SequenceInputNames(const inference::ModelConfig& config) {
  std::vector<std::string> names;
  if (!config.has_sequence_batching()) return names;
  for (const auto& input : config.sequence_batching().control_input())
    names.push_back(input.name());
  for (const auto& state : config.sequence_batching().state()) names.push_back(state.input_name());
  return names;
}

std::vector<std::string> SequenceOutputNames(const inference::ModelConfig& config) {
  std::vector<std::string> names;
  if (!config.has_sequence_batching()) return names;
  for (const auto& state : config.sequence_batching().state()) names.push_back(state.output_name());
  return names;
}

absl::Status CheckSequenceBatching(const inference::ModelConfig& config) {
  if (!config.has_sequence_batching()) return absl::OkStatus();
  const inference::ModelSequenceBatching& batching = config.sequence_batching();
  absl::flat_hash_set<std::string> names;
  std::set<int> kinds;
  for (const auto& input : batching.control_input()) {
    const std::string what =
        absl::StrCat("sequence_batching.control_input '", absl::CEscape(input.name()), "'");
    if (input.name().empty()) {
      return absl::InvalidArgumentError("sequence_batching.control_input: an input has no name");
    }
    if (!names.insert(input.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": named twice"));
    }
    if (input.control_size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": has ", input.control_size(), " controls; give exactly one"));
    }
    const Control& control = input.control(0);
    if (!kinds.insert(control.kind()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", KindName(control.kind()), " is already another input's"));
    }
    const int lists = (control.int32_false_true_size() > 0) + (control.fp32_false_true_size() > 0) +
                      (control.bool_false_true_size() > 0);
    if (control.kind() == Control::CONTROL_SEQUENCE_CORRID) {
      const inference::DataType t = control.data_type();
      if (lists > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": CONTROL_SEQUENCE_CORRID takes a data_type, not false/true values"));
      }
      if (t != inference::TYPE_INT32 && t != inference::TYPE_INT64 && t != inference::TYPE_UINT32 &&
          t != inference::TYPE_UINT64 && t != inference::TYPE_STRING) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": CONTROL_SEQUENCE_CORRID data_type ", inference::DataType_Name(t),
                         " is not one of TYPE_INT32, TYPE_INT64, TYPE_UINT32, TYPE_UINT64, "
                         "TYPE_STRING"));
      }
      continue;
    }
    const int values = control.int32_false_true_size() + control.fp32_false_true_size() +
                       control.bool_false_true_size();
    if (lists != 1 || values != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", KindName(control.kind()),
          " needs exactly one of int32_false_true, fp32_false_true, bool_false_true, with two "
          "values (false, true)"));
    }
    if (control.data_type() != inference::TYPE_INVALID) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", KindName(control.kind()),
                       " takes its type from its false/true values, not a data_type"));
    }
  }
  absl::flat_hash_set<std::string> state_names;
  for (const auto& state : batching.state()) {
    const std::string what =
        absl::StrCat("sequence_batching.state '", absl::CEscape(state.input_name()), "'");
    if (state.input_name().empty() || state.output_name().empty()) {
      return absl::InvalidArgumentError(
          "sequence_batching.state: a state needs input_name and output_name");
    }
    if (names.contains(state.input_name()) || !state_names.insert(state.input_name()).second ||
        !state_names.insert("\x01" + state.output_name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a name given twice (input '", absl::CEscape(state.input_name()),
                       "', output '", absl::CEscape(state.output_name()), "')"));
    }
    if (state.data_type() == inference::TYPE_INVALID ||
        state.data_type() == inference::TYPE_STRING) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": data_type ",
                                                     inference::DataType_Name(state.data_type()),
                                                     " (a state needs a fixed-size element type)"));
    }
    if (state.dims_size() == 0 && config.max_batch_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": no dims"));
    }
    for (int64_t d : state.dims()) {
      if (d < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": dims ", FormatDims(ToVector(state.dims())),
                         " (a state's dims are fixed, each >= 1; the batch dim is left out)"));
      }
    }
    if (state.use_growable_memory()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       ": use_growable_memory needs a GPU backend; loopserve's states are "
                       "fixed-size"));
    }
    if (state.initial_state_size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": more than one initial_state"));
    }
    for (const auto& initial : state.initial_state()) {
      if (initial.data_type() != state.data_type() ||
          ToVector(initial.dims()) != ToVector(state.dims())) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": initial_state has data_type ", inference::DataType_Name(initial.data_type()),
            " dims ", FormatDims(ToVector(initial.dims())), ", the state ",
            inference::DataType_Name(state.data_type()), " ", FormatDims(ToVector(state.dims()))));
      }
      if (initial.state_data_case() ==
          inference::ModelSequenceBatching::InitialState::STATE_DATA_NOT_SET) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": initial_state needs zero_data or data_file"));
      }
      if (initial.has_data_file() && !IsPlainFileName(initial.data_file())) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": initial_state data_file '", absl::CEscape(initial.data_file()),
                         "' must be a file name in the model's initial_state/ folder"));
      }
    }
  }
  if (batching.has_oldest()) {
    const auto& oldest = batching.oldest();
    if (oldest.max_candidate_sequences() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence_batching.oldest.max_candidate_sequences ",
                       oldest.max_candidate_sequences(), " must be >= 0"));
    }
    for (int32_t size : oldest.preferred_batch_size()) {
      if (size < 1 || size > std::max(config.max_batch_size(), 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence_batching.oldest.preferred_batch_size ", size, " is outside [1, ",
                         std::max(config.max_batch_size(), 1), "] (max_batch_size)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSequenceAgainstModel(const inference::ModelConfig& config,
                                       const engine::Model& model) {
  if (!config.has_sequence_batching()) return absl::OkStatus();
  const inference::ModelSequenceBatching& batching = config.sequence_batching();
  const bool batched = config.max_batch_size() > 0;
  LS_ASSIGN_OR_RETURN(const BatchLayout layout, ReadBatchLayout(config));
  for (const auto& input : batching.control_input()) {
    const std::string what =
        absl::StrCat("sequence_batching.control_input '", absl::CEscape(input.name()), "'");
    const int index = FindSpec(model.inputs(), input.name());
    if (index < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": the model has no such input (it has ",
                                                     ListNames(model.inputs()), ")"));
    }
    const engine::TensorSpec& spec = model.inputs()[index];
    LS_RETURN_IF_ERROR(CheckDataType(what, ControlType(input.control(0)), spec.type.dtype));
    // Triton's control tensors are [1] per sequence: [batch, 1] with batching.
    LS_RETURN_IF_ERROR(
        CheckAgainstModel(what, true, "dims", {1}, spec.type.dims, batched ? 0 : -1));
  }
  for (const auto& state : batching.state()) {
    const std::string what =
        absl::StrCat("sequence_batching.state '", absl::CEscape(state.input_name()), "'");
    const int in = FindSpec(model.inputs(), state.input_name());
    const int out = FindSpec(model.outputs(), state.output_name());
    if (in < 0 || out < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the model has no ", in < 0 ? "input '" : "output '",
                       absl::CEscape(in < 0 ? state.input_name() : state.output_name()),
                       "' (it has ", ListNames(in < 0 ? model.inputs() : model.outputs()), ")"));
    }
    const int axis = batched ? layout.OutputAxis(state.output_name()) : -1;
    const std::vector<int64_t> dims = ToVector(state.dims());
    for (const engine::TensorSpec* spec : {&model.inputs()[in], &model.outputs()[out]}) {
      const std::string tensor_what = absl::StrCat(what, " (model tensor '", spec->name, "')");
      LS_RETURN_IF_ERROR(CheckDataType(tensor_what, state.data_type(), spec->type.dtype));
      LS_RETURN_IF_ERROR(
          CheckAgainstModel(tensor_what, false, "dims", dims, spec->type.dims, axis));
    }
  }
  return absl::OkStatus();
}

}  // namespace loopserve::server
