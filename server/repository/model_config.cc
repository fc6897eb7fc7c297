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
#include "server/repository/model_config_internal.h"
#include "server/repository/repo_file.h"

// config.pbtxt read and parsed (text -> ModelConfig), the model file it names, the parameters and
// batch layout read back, the data type table. The checks after the parse: model_config_check.cc.

namespace loopserve::server {
namespace {

namespace fs = std::filesystem;
using inference::ModelConfig;

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

absl::StatusOr<engine::LoadOptions::Precision> ParsePrecision(absl::string_view name) {
  for (engine::LoadOptions::Precision precision :
       {engine::LoadOptions::Precision::kFp32, engine::LoadOptions::Precision::kBf16}) {
    if (name == PrecisionName(precision)) return precision;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("must be fp32 or bf16, not '", absl::CEscape(name), "'"));
}

const char* PrecisionName(engine::LoadOptions::Precision precision) {
  switch (precision) {
    case engine::LoadOptions::Precision::kFp32:
      return "fp32";
    case engine::LoadOptions::Precision::kBf16:
      return "bf16";
  }
  return "fp32";
}

engine::LoadOptions::Precision PrecisionOr(const inference::ModelConfig& config,
                                           engine::LoadOptions::Precision fallback) {
  auto it = config.parameters().find(kPrecisionParameter);
  if (it == config.parameters().end()) return fallback;
  return ParsePrecisionParameter(it->second).value_or(fallback);
}

int InstanceCount(const inference::ModelConfig& config) {
  int64_t count = 0;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    if (group.kind() != inference::ModelInstanceGroup::KIND_GPU)
      count += std::max(group.count(), 0);
  }
  return static_cast<int>(std::min<int64_t>(count, std::numeric_limits<int>::max()));
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

bool IterationBatchingOn(const inference::ModelConfig& config) {
  auto it = config.parameters().find(kIterationBatchingParameter);
  return it != config.parameters().end() && it->second.string_value() == "true";
}

}  // namespace loopserve::server
