#include <algorithm>
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
#include "engine/tensor/dtype.h"
#include "engine/tensor/scalar_like.h"
#include "engine/tensor/shape.h"
#include "server/repository/model_config.h"
#include "server/repository/model_config_internal.h"

// Validation of a parsed config.pbtxt alone (no model needed): settings rejected, ignored or
// checked (CheckParsed).

namespace loopserve::server {
namespace {

using inference::ModelConfig;

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

bool IsNumericParameter(absl::string_view key) {
  return key == kMaxLoopIterationsParameter || key == kMaxOutputBytesParameter ||
         key == kMaxRequestMemoryBytesParameter;
}

bool IsLoopserveParameter(absl::string_view key) {
  return IsNumericParameter(key) || key == kUnbatchedInputsParameter ||
         key == kOutputBatchAxesParameter || key == kLoopThreadsParameter ||
         key == kIterationBatchingParameter || key == kPrecisionParameter;
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

}  // namespace

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

absl::StatusOr<engine::LoadOptions::Precision> ParsePrecisionParameter(
    const inference::ModelParameter& value) {
  absl::StatusOr<engine::LoadOptions::Precision> precision =
      ParsePrecision(absl::StripAsciiWhitespace(value.string_value()));
  if (!precision.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters '", kPrecisionParameter, "': string_value ", precision.status().message()));
  }
  return precision;
}

// parameters 'iteration_batching': "true" or "false"; "true" needs the dynamic-batching layout.
absl::Status CheckIterationBatching(const ModelConfig& config,
                                    const inference::ModelParameter& value) {
  const std::string& v = value.string_value();
  if (v != "true" && v != "false") {
    return absl::InvalidArgumentError(absl::StrCat("parameters '", kIterationBatchingParameter,
                                                   "': string_value must be true or false, not '",
                                                   absl::CEscape(v), "'"));
  }
  if (v == "true" && (config.max_batch_size() <= 0 || !config.has_dynamic_batching())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters '", kIterationBatchingParameter,
        "' needs max_batch_size > 0 (rows per running batch) and dynamic_batching { }"));
  }
  return absl::OkStatus();
}

std::vector<std::string> ParameterItems(const ModelConfig& config, absl::string_view key) {
  std::vector<std::string> items;
  auto it = config.parameters().find(std::string(key));
  if (it == config.parameters().end()) return items;
  for (absl::string_view item : absl::StrSplit(it->second.string_value(), ',')) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
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
    } else if (key == kIterationBatchingParameter) {
      LS_RETURN_IF_ERROR(CheckIterationBatching(config, value));
    } else if (key == kPrecisionParameter) {
      LS_RETURN_IF_ERROR(ParsePrecisionParameter(value).status());
    } else if (!IsLoopserveParameter(key)) {
      parsed.ignored.push_back(absl::StrCat(
          "parameters '", absl::CEscape(key),
          "' ignored: not a loopserve setting (loopserve reads ", kMaxLoopIterationsParameter, ", ",
          kMaxOutputBytesParameter, ", ", kMaxRequestMemoryBytesParameter, ", ",
          kLoopThreadsParameter, ", ", kUnbatchedInputsParameter, ", ", kOutputBatchAxesParameter,
          ", ", kIterationBatchingParameter, ", ", kPrecisionParameter, ")"));
    }
  }
  LS_RETURN_IF_ERROR(ReadBatchLayout(config).status());
  LS_RETURN_IF_ERROR(CheckDynamicBatching(config));
  LS_RETURN_IF_ERROR(CheckSequenceBatching(config));
  return CheckWarmup(config);
}

// ---- sequence_batching ----

namespace {

using Control = inference::ModelSequenceBatching::Control;

std::string KindName(Control::Kind kind) { return Control::Kind_Name(kind); }

// The sequence batcher makes its slots and their states at load: a config may not make it
// allocate without bound (max_candidate_sequences: 2000000000, or a state of 10^12 elements).
constexpr int64_t kMaxSequenceSlots = int64_t{1} << 20;
constexpr int64_t kMaxSequenceStateBytes = int64_t{16} << 30;

}  // namespace

int64_t SequenceSlots(const inference::ModelConfig& config) {
  const inference::ModelSequenceBatching& batching = config.sequence_batching();
  if (batching.has_oldest() && batching.oldest().max_candidate_sequences() > 0) {
    return batching.oldest().max_candidate_sequences();
  }
  int64_t instances = 0;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    if (group.kind() == inference::ModelInstanceGroup::KIND_GPU) continue;  // completion drops it
    instances = std::min(instances + std::max<int64_t>(group.count(), 1), kMaxSequenceSlots + 1);
  }
  return int64_t{std::max(config.max_batch_size(), 1)} * std::max<int64_t>(instances, 1);
}

namespace {

// One control_input: a name of its own, one control of a kind no other input has, a CORRID's
// data_type or another kind's false/true values.
absl::Status CheckControlInput(const inference::ModelSequenceBatching::ControlInput& input,
                               absl::flat_hash_set<std::string>& names, std::set<int>& kinds) {
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
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": CONTROL_SEQUENCE_CORRID takes a data_type, not false/true values"));
    }
    if (t != inference::TYPE_INT32 && t != inference::TYPE_INT64 && t != inference::TYPE_UINT32 &&
        t != inference::TYPE_UINT64 && t != inference::TYPE_STRING) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": CONTROL_SEQUENCE_CORRID data_type ", inference::DataType_Name(t),
                       " is not one of TYPE_INT32, TYPE_INT64, TYPE_UINT32, TYPE_UINT64, "
                       "TYPE_STRING"));
    }
    return absl::OkStatus();
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
  return absl::OkStatus();
}

// A state's initial_state: at most one, of the state's type and dims, with zero_data or a plain
// data_file name.
absl::Status CheckInitialState(const inference::ModelSequenceBatching::State& state,
                               const std::string& what) {
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
  return absl::OkStatus();
}

// One state: names of its own (`names`: the control inputs'; `state_names` grows), a fixed-size
// type, fixed dims, and its bytes added to `state_bytes` (one slot's) within the bound for
// `slots` slots.
absl::Status CheckState(const inference::ModelSequenceBatching::State& state,
                        const inference::ModelConfig& config,
                        const absl::flat_hash_set<std::string>& names,
                        absl::flat_hash_set<std::string>& state_names, int64_t slots,
                        int64_t& state_bytes) {
  const std::string what =
      absl::StrCat("sequence_batching.state '", absl::CEscape(state.input_name()), "'");
  if (state.input_name().empty() || state.output_name().empty()) {
    return absl::InvalidArgumentError(
        "sequence_batching.state: a state needs input_name and output_name");
  }
  if (names.contains(state.input_name()) || !state_names.insert(state.input_name()).second ||
      !state_names.insert("\x01" + state.output_name()).second) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a name given twice (input '",
                                                   absl::CEscape(state.input_name()), "', output '",
                                                   absl::CEscape(state.output_name()), "')"));
  }
  if (state.data_type() == inference::TYPE_INVALID || state.data_type() == inference::TYPE_STRING) {
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
  if (FixedProduct(ToVector(state.dims())) > engine::kMaxElements) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dims ", FormatDims(ToVector(state.dims())), " is too large"));
  }
  // Each term is at most kMaxElements * 16: the sum is checked before it could overflow.
  state_bytes += FixedProduct(ToVector(state.dims())) *
                 static_cast<int64_t>(engine::DataTypeSize(DataTypeFromConfig(state.data_type())));
  if (state_bytes > kMaxSequenceStateBytes / slots) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the states of ", slots, " sequence slots would hold more than ",
                     kMaxSequenceStateBytes, " bytes (", state_bytes, " bytes a slot)"));
  }
  if (state.use_growable_memory()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": use_growable_memory needs a GPU backend; loopserve's states are "
                     "fixed-size"));
  }
  return CheckInitialState(state, what);
}

// The oldest strategy's candidates and preferred batch sizes.
absl::Status CheckOldest(const inference::ModelConfig& config) {
  const auto& oldest = config.sequence_batching().oldest();
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
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSequenceBatching(const inference::ModelConfig& config) {
  if (!config.has_sequence_batching()) return absl::OkStatus();
  const inference::ModelSequenceBatching& batching = config.sequence_batching();
  absl::flat_hash_set<std::string> names;
  std::set<int> kinds;
  for (const auto& input : batching.control_input()) {
    LS_RETURN_IF_ERROR(CheckControlInput(input, names, kinds));
  }
  const int64_t slots = SequenceSlots(config);
  if (slots > kMaxSequenceSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence_batching: ", slots,
                     " sequence slots (oldest.max_candidate_sequences, or "
                     "max_batch_size x instance_group count) is more than ",
                     kMaxSequenceSlots));
  }
  absl::flat_hash_set<std::string> state_names;
  int64_t state_bytes = 0;  // of one slot
  for (const auto& state : batching.state()) {
    LS_RETURN_IF_ERROR(CheckState(state, config, names, state_names, slots, state_bytes));
  }
  if (batching.has_oldest()) LS_RETURN_IF_ERROR(CheckOldest(config));
  return absl::OkStatus();
}

}  // namespace loopserve::server
