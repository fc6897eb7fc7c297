#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/engine.h"
#include "engine/tensor/value.h"
#include "proto/model_config.pb.h"

namespace loopserve::server {

// A model's configuration: Triton's ModelConfig (proto/model_config.proto) read from
// `<model>/config.pbtxt`, checked, completed from the model and turned into what the request path
// needs. Stateless functions; thread-safe.
//
// Three steps, as in Triton:
//   ParseModelConfig     the text alone: syntax, unknown fields, values that need no model
//                        (platform, counts, parameters, batching, warm-up samples)
//   CompleteModelConfig  against the loaded model: declared inputs/outputs must exist with the
//                        declared type and compatible dims; what is missing is filled in from the
//                        model (auto-complete) unless disabled
//   ModelIo::Build       the complete config as per-tensor checks and reshapes for requests

// loopserve's own per-model settings: `parameters` keys (decimal string values, >= 0; 0 = the
// server's flag).
inline constexpr char kMaxLoopIterationsParameter[] = "max_loop_iterations";
inline constexpr char kMaxOutputBytesParameter[] = "max_output_bytes";
inline constexpr char kMaxRequestMemoryBytesParameter[] = "max_request_memory_bytes";
// How the version's Loops use the intra-op threads (engine::RunOptions::loop_threads): "adaptive",
// "intra_op" or "one" (engine::ParseLoopThreads); absent = the server's --loop_threads.
inline constexpr char kLoopThreadsParameter[] = "loop_threads";
// The precision of the version's products (engine::LoadOptions::precision): "fp32" or "bf16"
// (ParsePrecision); absent = the server's --precision. The complete config shows the
// effective one.
inline constexpr char kPrecisionParameter[] = "precision";
// The names of engine::LoadOptions::Precision: "fp32", "bf16" (the precision parameter's values,
// loopserve's --precision, as looprun's). For any other name InvalidArgument "must be fp32 or
// bf16, not '<name>'", which the caller prefixes with what it parsed.
absl::StatusOr<engine::LoadOptions::Precision> ParsePrecision(absl::string_view name);
const char* PrecisionName(engine::LoadOptions::Precision precision);

// loopserve's batching layout (with max_batch_size > 0; Triton assumes every tensor has the batch
// dim first). `unbatched_inputs`: comma-separated names of inputs without a batch dim (a Loop's
// trip count and condition): their config dims are the model's whole dims, and the dynamic
// batcher merges requests only when these inputs are byte-equal. `output_batch_axes`:
// comma-separated `name:axis` for outputs whose batch dim is not the first (a Loop scan output
// [T, B, H] has it at 1); its config dims leave that axis out.
inline constexpr char kUnbatchedInputsParameter[] = "unbatched_inputs";
inline constexpr char kOutputBatchAxesParameter[] = "output_batch_axes";
// Iteration-level batching ("true" or "false"; needs max_batch_size > 0 and dynamic_batching):
// each instance keeps one running batch of the top-level Loop that requests join and leave
// between iterations (server/scheduling/iteration_batcher.h).
inline constexpr char kIterationBatchingParameter[] = "iteration_batching";
// Whether a config turns iteration batching on (its value is checked by ParseModelConfig).
bool IterationBatchingOn(const inference::ModelConfig& config);

// The batching layout the two parameters above describe.
struct BatchLayout {
  std::vector<std::string> unbatched_inputs;
  std::vector<std::pair<std::string, int>> output_axes;  // name, batch axis (>= 0)

  bool InputBatched(absl::string_view name) const;
  int OutputAxis(absl::string_view name) const;  // 0 unless listed
};

// Reads the layout from a config's parameters; InvalidArgument naming the parameter for a syntax
// error, an empty or repeated name, an axis that is not a non-negative integer, or either
// parameter without max_batch_size > 0.
absl::StatusOr<BatchLayout> ReadBatchLayout(const inference::ModelConfig& config);

// What kind of engine model a config names: from platform/backend, else from the file found.
enum class ModelFormat { kUnknown, kOnnx, kOpenVino };

// A parsed config.pbtxt and what of it loopserve does not apply.
struct ParsedModelConfig {
  std::string model_name;
  inference::ModelConfig config;
  // One line per Triton setting that is accepted but means nothing here ("instance_group[1]:
  // KIND_GPU ignored: loopserve runs on the CPU"); the registry logs them once per config change.
  std::vector<std::string> ignored;
  bool from_file = false;  // false: there was no config.pbtxt (the defaults)
};

// Parses the protobuf text format of a Triton ModelConfig and checks what needs no model. Errors
// name the field and start with "config.pbtxt: ":
//   InvalidArgument: brackets nested deeper than kMaxConfigNesting (server/repository/repo_file.h;
//   checked
//     before parsing); a syntax error or a name that is no Triton field (line:column, never the
//     text: the file may be no config at all); loopserve's old top-level settings
//     (max_loop_iterations, max_output_bytes, instance_count) with where they moved; `name`
//     other than `model_name`; a platform/backend other than onnxruntime_onnx, onnxruntime,
//     openvino (or the two disagreeing); a default_model_filename that is not a plain file name;
//     negative max_batch_size, instance count or dims below -1; a duplicate tensor name; a
//     reshape with more than one -1; a specific version policy listing a version <= 0;
//     dynamic_batching without max_batch_size > 0 or with preferred sizes / priorities out of
//     range; a loopserve parameter that is not a non-negative integer; a warm-up sample without
//     a name, with batch_size above max_batch_size, an input without data or data_type, a
//     variable dim, or a data file outside the model's warmup/ folder; a malformed
//     unbatched_inputs / output_batch_axes (ReadBatchLayout).
//     a malformed sequence_batching (CheckSequenceBatching); a precision other than fp32 or
//     bf16.
//   Unimplemented: Triton features loopserve does not have (sequence_batching's
//     iterative_sequence, ensemble_scheduling, batch_input/batch_output, model_operations,
//     model_repository_agents, decoupled transactions).
absl::StatusOr<ParsedModelConfig> ParseModelConfig(absl::string_view text,
                                                   absl::string_view model_name);

// Largest config.pbtxt read.
inline constexpr uintmax_t kMaxModelConfigBytes = 1 << 20;

// Reads and parses `<model_dir>/config.pbtxt` (opened by ReadRepositoryFile: inside the model
// folder, a regular file); the defaults (from_file false) when there is none; InvalidArgument when
// it leaves the model folder, is no regular file, is larger than kMaxModelConfigBytes, is
// unreadable or malformed.
absl::StatusOr<ParsedModelConfig> ReadModelConfig(const std::string& model_dir,
                                                  absl::string_view model_name);

// The format `config` asks for (kUnknown when it names neither platform nor backend).
ModelFormat ConfigFormat(const inference::ModelConfig& config);

// The model file of a version folder: `default_model_filename` when set, else `model.onnx` /
// `model.xml` as the platform asks, else whichever of the two exists. With `any_name` (OpenVINO
// Model Server repositories, whose files may have any name) a folder without those names may hold
// exactly one `*.onnx` or `*.xml`. NotFound naming what was looked for; InvalidArgument when
// `any_name` finds more than one candidate.
absl::StatusOr<std::string> FindModelFile(const std::string& version_dir,
                                          const inference::ModelConfig& config,
                                          bool any_name = false);

// Server-wide settings CompleteModelConfig fills in.
struct CompletionOptions {
  bool auto_complete = true;        // false: Triton's --disable-auto-complete-config
  int64_t max_loop_iterations = 0;  // the server's flags (0 = unlimited)
  int64_t max_output_bytes = 0;
  int64_t max_request_memory_bytes = 0;
  engine::LoopThreads loop_threads = engine::LoopThreads::kAdaptive;  // --loop_threads
  engine::LoadOptions::Precision precision = engine::LoadOptions::Precision::kFp32;  // --precision
  int default_instance_count = 1;  // instance count of a config that gives none (--workers)
};

// Checks `config` (from ParseModelConfig) against `model` loaded from `model_file` and returns the
// complete config the version runs with: name, platform and backend, default_model_filename,
// version_policy, every tensor input and output of the model (declared ones kept as declared, in
// their order, the others appended from the model: data_type, dims without the batch dimension
// when max_batch_size > 0, optional), instance_group normalised to CPU groups with counts (GPU
// groups dropped), and parameters with the effective max_loop_iterations, max_output_bytes,
// max_request_memory_bytes, loop_threads and precision.
// Sequence-valued model inputs/outputs have no Triton spelling and are left out.
//
// InvalidArgument naming the tensor, the field and both values for: a declared input or output the
// model does not have; a data_type other than the model's; dims (or reshape) of another rank or
// with a fixed dim other than the model's; a reshape whose element count cannot match dims;
// max_batch_size > 0 on a model whose batch dim (the first, or the axis output_batch_axes gives;
// none for unbatched_inputs) is not variable; unbatched_inputs / output_batch_axes naming a
// tensor the model does not have; `optional: true` on an input
// the model requires; a warm-up input that is not declared, has another data_type or dims the
// declared ones do not admit, or a required input a warm-up sample leaves out. With auto_complete
// false, also for a missing config.pbtxt, platform/backend, data_type or model tensor.
absl::StatusOr<inference::ModelConfig> CompleteModelConfig(const ParsedModelConfig& parsed,
                                                           const engine::Model& model,
                                                           absl::string_view model_file,
                                                           const CompletionOptions& options);

// The effective value of a loopserve parameter of a complete or parsed config: its integer value,
// or `fallback` when absent or 0. (ParseModelConfig has checked the values.)
int64_t ParameterOr(const inference::ModelConfig& config, absl::string_view key, int64_t fallback);
// The same for the loop_threads parameter: its mode, or `fallback` when absent.
engine::LoopThreads LoopThreadsOr(const inference::ModelConfig& config,
                                  engine::LoopThreads fallback);
// The same for the precision parameter.
engine::LoadOptions::Precision PrecisionOr(const inference::ModelConfig& config,
                                           engine::LoadOptions::Precision fallback);

// The instance count of a complete config: the sum of its CPU groups' counts.
int InstanceCount(const inference::ModelConfig& config);

// The complete config of a version as the request path applies it: which dims a request may send
// for each input, the shape the model takes instead (reshape), and the shape clients see for each
// output. Built once per version; immutable; shared read-only by every request.
class ModelIo {
 public:
  struct Tensor {
    std::string name;
    engine::DataType dtype = engine::DataType::kUndefined;
    // Client-side dims including the batch dim (-1, at batch_axis) when batching; std::nullopt
    // when the model's rank is unknown and the config gives none (no check).
    std::optional<std::vector<int64_t>> dims;
    // Where the batch dim is (0 for inputs; output_batch_axes for outputs); -1 without one
    // (max_batch_size 0, unbatched_inputs).
    int batch_axis = -1;
    // Model-side dims (with the batch dim) when the config reshapes this tensor.
    std::optional<std::vector<int64_t>> reshape;
    bool optional = false;  // inputs: may be left out
    int model_index = -1;   // index in Model::inputs() / outputs()
  };

  // `config` must be the complete config CompleteModelConfig returned for `model`.
  static ModelIo Build(const inference::ModelConfig& config, const engine::Model& model);

  const std::vector<Tensor>& inputs() const { return inputs_; }    // in config order
  const std::vector<Tensor>& outputs() const { return outputs_; }  // in config order
  int max_batch_size() const { return max_batch_size_; }
  // The batch axis of a model input / output by its Model::inputs() / outputs() index; -1 when
  // it has none (or the config does not list it).
  int InputBatchAxis(int model_index) const;
  int OutputBatchAxis(int model_index) const;

  // Checks decoded request inputs (Model::inputs() order; absent ones are kNone) against the
  // config and reshapes them in place: InvalidArgument naming the input for a missing required
  // input, dims the config does not admit (a batch dim outside [1, max_batch_size]), or an element
  // count the reshape cannot take; with max_batch_size > 0, also batched inputs whose batch dims
  // differ (the request's batch size is ambiguous). Costs a few comparisons per input; allocates
  // nothing.
  absl::Status AdaptInputs(std::vector<engine::Value>& inputs) const;

  // Reshapes model outputs (Model::outputs() order) to the config's dims where it reshapes them.
  // InvalidArgument naming the output when the element count does not fit.
  absl::Status AdaptOutputs(std::vector<engine::Value>& outputs) const;

 private:
  std::vector<Tensor> inputs_;
  std::vector<Tensor> outputs_;
  std::vector<int> input_by_model_index_;   // model input index -> inputs_ index (-1: none)
  std::vector<int> output_by_model_index_;  // model output index -> outputs_ index (-1: none)
  bool any_output_reshape_ = false;
  int max_batch_size_ = 0;
};

// ---- sequence_batching (Triton's stateful models) ----
// The control inputs (START/READY/END/CORRID) and implicit state tensors of `sequence_batching` are
// fed by the server's sequence batcher (server/scheduling/sequence_batcher.h), never by clients:
// they stay out of the complete config's `input` / `output` lists and a request may not send them.
// A state's batch axis, when max_batch_size > 0, is its output's entry in the `output_batch_axes`
// parameter (Silero VAD's `[2, batch, 128]` state: "stateN:1"); 0 otherwise.

// Model input names the batcher feeds (control inputs, then state inputs), in config order.
std::vector<std::string> SequenceInputNames(const inference::ModelConfig& config);
// Model output names the batcher keeps (state outputs), in config order.
std::vector<std::string> SequenceOutputNames(const inference::ModelConfig& config);

// The text-level checks of `sequence_batching` (ParseModelConfig runs it). InvalidArgument naming
// the field for: a control input without a name, named twice, with no or several controls, or a
// kind given twice; START/READY/END without exactly one of int32_false_true / fp32_false_true /
// bool_false_true holding two values, or with a data_type; CORRID without a data_type of INT32,
// INT64, UINT32, UINT64 or STRING, or with false/true values; a state without input_name,
// output_name, data_type (not STRING) or fixed dims >= 1, a name twice, more than one
// initial_state, an initial_state whose data_type / dims differ from the state's, without
// zero_data or data_file, or a data_file that is not a plain file name; oldest's
// max_candidate_sequences < 0, preferred_batch_size outside [1, max_batch_size]; more than 2^20
// sequence slots (max_candidate_sequences, else max_batch_size x instance counts as given), or
// states of all slots over 16 GiB (the batcher allocates both at load).
absl::Status CheckSequenceBatching(const inference::ModelConfig& config);

// The sequence batcher's slots (sequences live at once) under `config`'s sequence_batching, the
// one rule the checks and the batcher (SequencePolicy::FromConfig) share: oldest's
// max_candidate_sequences when set, else a slot per batch row (max_batch_size, at least 1) of
// each instance (a CPU group's count, 1 where none is given yet; the complete config gives every
// count); beyond 2^20 instances the count stops growing (the checks refuse that many slots).
int64_t SequenceSlots(const inference::ModelConfig& config);

// The checks against the model (CompleteModelConfig runs it): each control and state input is a
// model input, each state output a model output, with the control's type (INT32 / FP32 / BOOL or
// CORRID's data_type) and the state's data_type and dims (with the batch dim at the state's axis
// when max_batch_size > 0).
absl::Status CheckSequenceAgainstModel(const inference::ModelConfig& config,
                                       const engine::Model& model);

// Triton's DataType <-> engine element types (TYPE_STRING: kString). TYPE_INVALID maps to
// kUndefined.
engine::DataType DataTypeFromConfig(inference::DataType type);
inference::DataType DataTypeToConfig(engine::DataType type);

}  // namespace loopserve::server
