#include "server/repository/ovms_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"
#include "google/protobuf/arena.h"
#include "google/protobuf/struct.pb.h"
#include "server/repository/repo_file.h"
#include "simdjson.h"

namespace loopserve::server {
namespace {

namespace fs = std::filesystem;
using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

std::string Quoted(absl::string_view text) { return absl::StrCat("'", absl::CEscape(text), "'"); }

const char* KindName(const Value& value) {
  switch (value.kind_case()) {
    case Value::kNullValue:
      return "null";
    case Value::kNumberValue:
      return "a number";
    case Value::kStringValue:
      return "a string";
    case Value::kBoolValue:
      return "a boolean";
    case Value::kStructValue:
      return "an object";
    case Value::kListValue:
      return "an array";
    case Value::KIND_NOT_SET:
      break;
  }
  return "nothing";
}

absl::Status WrongType(absl::string_view path, const Value& value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": expected ", expected, ", got ", KindName(value)));
}

absl::StatusOr<const Struct*> AsObject(const Value& value, absl::string_view path) {
  if (value.kind_case() != Value::kStructValue) return WrongType(path, value, "an object");
  return &value.struct_value();
}

absl::StatusOr<const ListValue*> AsList(const Value& value, absl::string_view path) {
  if (value.kind_case() != Value::kListValue) return WrongType(path, value, "an array");
  return &value.list_value();
}

absl::StatusOr<std::string> AsString(const Value& value, absl::string_view path) {
  if (value.kind_case() != Value::kStringValue) return WrongType(path, value, "a string");
  return value.string_value();
}

// A JSON number that is an integer in [min, 2^53].
absl::StatusOr<int64_t> AsInteger(const Value& value, absl::string_view path, int64_t min) {
  if (value.kind_case() != Value::kNumberValue) return WrongType(path, value, "an integer");
  const double number = value.number_value();
  if (!(number >= static_cast<double>(min)) || number > 9007199254740992.0 ||
      number != std::floor(number)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", number, " must be an integer >= ", min));
  }
  return static_cast<int64_t>(number);
}

// The keys of `object` in sorted order (protobuf's map order is unspecified).
std::vector<std::string> SortedKeys(const Struct& object) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.fields()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

absl::StatusOr<inference::ModelVersionPolicy> ParseVersionPolicy(const Value& value,
                                                                 const std::string& path) {
  LS_ASSIGN_OR_RETURN(const Struct* object, AsObject(value, path));
  if (object->fields_size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": give exactly one of \"latest\", \"all\", \"specific\" (got ",
                     object->fields_size(), " keys)"));
  }
  const auto& [key, body] = *object->fields().begin();
  const std::string inner = absl::StrCat(path, ".", key);
  LS_ASSIGN_OR_RETURN(const Struct* fields, AsObject(body, inner));
  inference::ModelVersionPolicy policy;
  auto only = [&](absl::string_view allowed) -> absl::Status {
    for (const auto& [name, unused] : fields->fields()) {
      if (name != allowed) {
        return absl::InvalidArgumentError(absl::StrCat(inner, ": unknown key ", Quoted(name)));
      }
    }
    return absl::OkStatus();
  };
  if (key == "latest") {
    LS_RETURN_IF_ERROR(only("num_versions"));
    auto it = fields->fields().find("num_versions");
    if (it == fields->fields().end()) {
      return absl::InvalidArgumentError(absl::StrCat(inner, ": \"num_versions\" is required"));
    }
    LS_ASSIGN_OR_RETURN(int64_t n, AsInteger(it->second, inner + ".num_versions", 1));
    policy.mutable_latest()->set_num_versions(
        static_cast<uint32_t>(std::min<int64_t>(n, std::numeric_limits<uint32_t>::max())));
  } else if (key == "all") {
    LS_RETURN_IF_ERROR(only(""));
    policy.mutable_all();
  } else if (key == "specific") {
    LS_RETURN_IF_ERROR(only("versions"));
    auto it = fields->fields().find("versions");
    if (it == fields->fields().end()) {
      return absl::InvalidArgumentError(absl::StrCat(inner, ": \"versions\" is required"));
    }
    LS_ASSIGN_OR_RETURN(const ListValue* versions, AsList(it->second, inner + ".versions"));
    for (int i = 0; i < versions->values_size(); ++i) {
      LS_ASSIGN_OR_RETURN(
          int64_t v, AsInteger(versions->values(i), absl::StrCat(inner, ".versions[", i, "]"), 1));
      policy.mutable_specific()->add_versions(v);
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": unknown policy ", Quoted(key), " (expected \"latest\", \"all\" or \"specific\")"));
  }
  return policy;
}

// shape / batch_size / layout: "auto" means "whatever the request brings", which is what
// loopserve does anyway; anything else would reshape the model, which loopserve does not.
absl::Status CheckReshapeSetting(const std::string& key, const Value& value,
                                 const std::string& path, OvmsModelEntry& entry) {
  if (value.kind_case() == Value::kStringValue && value.string_value() == "auto") {
    entry.ignored.push_back(absl::StrCat(key,
                                         " \"auto\" ignored: loopserve takes any shape the "
                                         "model admits"));
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      path, ": loopserve serves the model's own shapes and cannot change them; remove ",
      Quoted(key), " or set it to \"auto\""));
}

absl::StatusOr<OvmsModelEntry> ParseModelEntry(const Value& item, const std::string& path,
                                               const std::string& config_dir) {
  LS_ASSIGN_OR_RETURN(const Struct* wrapper, AsObject(item, path));
  for (const std::string& key : SortedKeys(*wrapper)) {
    if (key != "config") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": unknown key ", Quoted(key), " (expected \"config\")"));
    }
  }
  auto config_it = wrapper->fields().find("config");
  if (config_it == wrapper->fields().end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": \"config\" is required"));
  }
  const std::string config_path = path + ".config";
  LS_ASSIGN_OR_RETURN(const Struct* config, AsObject(config_it->second, config_path));

  OvmsModelEntry entry;
  bool has_name = false;
  bool has_base_path = false;
  for (const std::string& key : SortedKeys(*config)) {
    const Value& value = config->fields().at(key);
    const std::string field = absl::StrCat(config_path, ".", key);
    if (key == "name") {
      LS_ASSIGN_OR_RETURN(entry.name, AsString(value, field));
      if (!IsValidModelName(entry.name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": ", Quoted(entry.name),
            " is not a valid model name (letters, digits, '_', '-', '.'; not starting with '.')"));
      }
      has_name = true;
    } else if (key == "base_path") {
      LS_ASSIGN_OR_RETURN(std::string base_path, AsString(value, field));
      if (base_path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty"));
      for (const char* scheme : {"gs://", "s3://", "azure://", "azfs://", "http://", "https://"}) {
        if (absl::StartsWith(base_path, scheme)) {
          return absl::UnimplementedError(absl::StrCat(
              field, ": ", Quoted(base_path),
              " is cloud storage, which loopserve does not read; copy the model to a local path"));
        }
      }
      fs::path resolved(base_path);
      if (resolved.is_relative()) resolved = fs::path(config_dir) / resolved;
      entry.base_path = resolved.lexically_normal().string();
      while (entry.base_path.size() > 1 && entry.base_path.back() == '/') {
        entry.base_path.pop_back();
      }
      has_base_path = true;
    } else if (key == "model_version_policy") {
      LS_ASSIGN_OR_RETURN(entry.version_policy, ParseVersionPolicy(value, field));
    } else if (key == "nireq") {
      LS_ASSIGN_OR_RETURN(entry.nireq, AsInteger(value, field, 0));
      entry.nireq = std::min<int64_t>(entry.nireq, std::numeric_limits<int32_t>::max());
    } else if (key == "target_device") {
      LS_ASSIGN_OR_RETURN(std::string device, AsString(value, field));
      if (device != "CPU") {
        entry.ignored.push_back(
            absl::StrCat("target_device ", Quoted(device), " ignored: loopserve runs on the CPU"));
      }
    } else if (key == "plugin_config") {
      LS_ASSIGN_OR_RETURN(const Struct* plugin, AsObject(value, field));
      std::vector<std::string> keys = SortedKeys(*plugin);
      // The one plugin setting loopserve has: the precision of the products.
      auto hint = std::find(keys.begin(), keys.end(), "INFERENCE_PRECISION_HINT");
      if (hint != keys.end()) {
        const std::string hint_field = absl::StrCat(field, ".INFERENCE_PRECISION_HINT");
        LS_ASSIGN_OR_RETURN(std::string precision,
                            AsString(plugin->fields().at(*hint), hint_field));
        if (precision == "f32") {
          entry.precision = "fp32";
        } else if (precision == "bf16") {
          entry.precision = "bf16";
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat(hint_field, ": ", Quoted(precision), " is not f32 or bf16"));
        }
        keys.erase(hint);
      }
      if (!keys.empty()) {
        entry.ignored.push_back(absl::StrCat(
            "plugin_config {", absl::StrJoin(keys, ", "),
            "} ignored: OpenVINO plugin settings do not apply (loopserve's are --workers, "
            "--intra_op_threads, nireq and INFERENCE_PRECISION_HINT)"));
      }
    } else if (key == "shape" || key == "batch_size" || key == "layout") {
      LS_RETURN_IF_ERROR(CheckReshapeSetting(key, value, field, entry));
    } else if (key == "stateful") {
      if (value.kind_case() != Value::kBoolValue) return WrongType(field, value, "a boolean");
      if (value.bool_value()) {
        return absl::UnimplementedError(
            absl::StrCat(field, ": stateful models are not implemented by loopserve"));
      }
    } else if (key == "idle_sequence_cleanup" || key == "max_sequence_number" ||
               key == "low_latency_transformation") {
      entry.ignored.push_back(absl::StrCat(
          key, " ignored: it concerns stateful models, which loopserve does not have"));
    } else if (key == "custom_loader_options") {
      return absl::UnimplementedError(
          absl::StrCat(field, ": custom loaders are not implemented by loopserve"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          ": unknown key (OpenVINO Model Server's model settings are name, base_path, "
          "model_version_policy, nireq, target_device, plugin_config, shape, batch_size, "
          "layout, stateful, ...)"));
    }
  }
  if (!has_name)
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": \"name\" is required"));
  if (!has_base_path) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": \"base_path\" is required"));
  }
  return entry;
}

// A parsed JSON document as a protobuf Value (what the rest of this file reads). Recursive: the
// depth has been checked (CheckConfigNesting). An object's repeated key keeps its last value.
void JsonToValue(const simdjson::dom::element& json, Value* value) {
  // Each get_*() matches the type just read, so none fails.
  switch (json.type()) {
    case simdjson::dom::element_type::ARRAY: {
      const simdjson::dom::array array = json.get_array().value_unsafe();
      ListValue* list = value->mutable_list_value();
      for (simdjson::dom::element item : array) JsonToValue(item, list->add_values());
      return;
    }
    case simdjson::dom::element_type::OBJECT: {
      const simdjson::dom::object object = json.get_object().value_unsafe();
      auto* fields = value->mutable_struct_value()->mutable_fields();
      for (simdjson::dom::key_value_pair field : object) {
        JsonToValue(field.value, &(*fields)[std::string(field.key)]);
      }
      return;
    }
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64:
    case simdjson::dom::element_type::DOUBLE:
      value->set_number_value(json.get_double().value_unsafe());  // integers convert
      return;
    case simdjson::dom::element_type::STRING:
      value->set_string_value(std::string(json.get_string().value_unsafe()));
      return;
    case simdjson::dom::element_type::BOOL:
      value->set_bool_value(json.get_bool().value_unsafe());
      return;
    case simdjson::dom::element_type::NULL_VALUE:
      value->set_null_value(google::protobuf::NULL_VALUE);
      return;
  }
}

}  // namespace

absl::StatusOr<OvmsConfig> ParseOvmsConfig(absl::string_view json, const std::string& config_dir) {
  // Depth first (JsonToValue recurses per level), then simdjson: protobuf's own JSON parser took
  // 17 s for 15 MB of arrays 30 deep, simdjson and the copy a fraction of a second.
  LS_RETURN_IF_ERROR(CheckConfigNesting(json, ConfigSyntax::kJson, "config.json"));
  OvmsConfig result;
  // On an arena: a file of brackets is millions of small messages, allocated and freed at once.
  google::protobuf::Arena arena;
  Value& root = *google::protobuf::Arena::CreateMessage<Value>(&arena);
  {
    simdjson::dom::parser parser;
    simdjson::dom::element document;
    const simdjson::error_code parsed =
        parser.parse(simdjson::padded_string(json.data(), json.size())).get(document);
    if (parsed != simdjson::SUCCESS) {
      // simdjson's messages name the kind of error, never the text.
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: not valid JSON: ", simdjson::error_message(parsed)));
    }
    JsonToValue(document, &root);
  }
  const absl::Status status = [&]() -> absl::Status {
    LS_ASSIGN_OR_RETURN(const Struct* top, AsObject(root, "(top level)"));
    bool has_list = false;
    for (const std::string& key : SortedKeys(*top)) {
      const Value& value = top->fields().at(key);
      if (key == "model_config_list") {
        LS_ASSIGN_OR_RETURN(const ListValue* list, AsList(value, key));
        absl::flat_hash_set<std::string> names;
        for (int i = 0; i < list->values_size(); ++i) {
          const std::string path = absl::StrCat(key, "[", i, "]");
          LS_ASSIGN_OR_RETURN(OvmsModelEntry entry,
                              ParseModelEntry(list->values(i), path, config_dir));
          if (!names.insert(entry.name).second) {
            return absl::InvalidArgumentError(
                absl::StrCat(path, ".config.name: ", Quoted(entry.name), " is listed twice"));
          }
          result.models.push_back(std::move(entry));
        }
        has_list = true;
      } else if (key == "pipeline_config_list" || key == "mediapipe_config_list" ||
                 key == "custom_loader_config_list" || key == "custom_node_library_config_list") {
        LS_ASSIGN_OR_RETURN(const ListValue* list, AsList(value, key));
        if (list->values_size() > 0) {
          return absl::UnimplementedError(absl::StrCat(
              key, ": loopserve serves models only (no pipelines, graphs or custom nodes)"));
        }
      } else if (key == "monitoring") {
        result.ignored.push_back(
            "monitoring ignored: loopserve's metrics are always on (--metrics_port)");
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(Quoted(key), ": unknown key (expected model_config_list)"));
      }
    }
    if (!has_list) {
      return absl::InvalidArgumentError("\"model_config_list\" is required");
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) return Annotate(status, "config.json: ");
  return result;
}

absl::StatusOr<OvmsConfig> ReadOvmsConfig(const std::string& path) {
  // Errors may reach clients (RepositoryModelLoad): they name the file by its role, not its path
  // (the server logs the path at startup).
  absl::StatusOr<std::string> text = ReadOperatorFile(path, kMaxOvmsConfigBytes, "config.json");
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError("the config file (--config_path) does not exist");
  }
  if (!text.ok()) return text.status();
  std::error_code ec;
  const std::string dir = fs::absolute(fs::path(path), ec).parent_path().string();
  return ParseOvmsConfig(*text, dir);
}

void ApplyOvmsEntry(const OvmsModelEntry& entry, ParsedModelConfig& parsed) {
  if (entry.version_policy.has_value()) {
    *parsed.config.mutable_version_policy() = *entry.version_policy;
  }
  if (entry.nireq > 0) {
    parsed.config.clear_instance_group();
    inference::ModelInstanceGroup* group = parsed.config.add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_CPU);
    group->set_count(static_cast<int32_t>(entry.nireq));
  }
  if (!entry.precision.empty()) {
    (*parsed.config.mutable_parameters())[kPrecisionParameter].set_string_value(entry.precision);
  }
  parsed.ignored.insert(parsed.ignored.end(), entry.ignored.begin(), entry.ignored.end());
}

}  // namespace loopserve::server
