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
#include "server/repository/model_config.h"
#include "server/repository/model_config_internal.h"

// Auto-complete: a parsed config checked against the loaded model and filled in
// (CompleteModelConfig).

namespace loopserve::server {
namespace {

namespace fs = std::filesystem;
using inference::ModelConfig;

// ---- Completion against the model ----

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

}  // namespace

// The Triton type name of an engine type, for messages ("TYPE_FP32").
std::string ConfigTypeName(engine::DataType type) {
  return inference::DataType_Name(DataTypeToConfig(type));
}

int FindSpec(const std::vector<engine::TensorSpec>& specs, absl::string_view name) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return static_cast<int>(i);
  }
  return -1;
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
    parameters[kPrecisionParameter].set_string_value(
        PrecisionName(PrecisionOr(config, options.precision)));
    parameters[kIterationBatchingParameter].set_string_value(IterationBatchingOn(config) ? "true"
                                                                                         : "false");
    return absl::OkStatus();
  }();
  if (!status.ok()) return Annotate(status, "config.pbtxt: ");
  return config;
}

// ---- sequence_batching ----

namespace {

using Control = inference::ModelSequenceBatching::Control;

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
