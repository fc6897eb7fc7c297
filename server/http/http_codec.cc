#include "server/http/http_codec.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "protocol/json_sink.h"
#include "rapidjson/writer.h"
#include "server/datatype.h"
#include "server/status_util.h"
#include "simdjson.h"

namespace loopserve::server {
namespace {

using engine::DataType;
using engine::Tensor;
using simdjson::dom::element;
using simdjson::dom::element_type;

absl::Status Invalid(absl::string_view what, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

// ---- reading JSON ----

// The JSON spelling of an element's kind, for messages.
absl::string_view KindName(const element& e) {
  switch (e.type()) {
    case element_type::ARRAY:
      return "an array";
    case element_type::OBJECT:
      return "an object";
    case element_type::INT64:
    case element_type::UINT64:
      return "an integer";
    case element_type::DOUBLE:
      return "a number";
    case element_type::STRING:
      return "a string";
    case element_type::BOOL:
      return "a boolean";
    case element_type::NULL_VALUE:
      return "null";
  }
  return "?";
}

// A non-negative integer field (sizes, dims, the timeout).
// What a field is called in an error message, in two parts joined only when a message is built:
// the request path names fields per request and per dim, and most are valid.
struct What {
  What(const char* whole) : first(whole) {}  // NOLINT: literals convert
  // A name built for the call (the string outlives the call it is an argument of).
  What(const std::string& whole) : first(whole) {}  // NOLINT

  What(absl::string_view prefix, absl::string_view suffix) : first(prefix), second(suffix) {}
  absl::string_view first, second;
};

absl::StatusOr<int64_t> NonNegativeInt(const element& e, What what) {
  if (e.type() == element_type::INT64) {
    const int64_t v = e.get_int64().value_unsafe();
    if (v >= 0) return v;
  } else if (e.type() == element_type::UINT64) {
    const uint64_t v = e.get_uint64().value_unsafe();
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(v);
    }
  }
  if (e.type() == element_type::INT64) {
    return absl::InvalidArgumentError(absl::StrCat(what.first, what.second,
                                                   " must be a non-negative integer, got ",
                                                   e.get_int64().value_unsafe()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what.first, what.second, " must be a non-negative integer, got ", KindName(e)));
}

absl::StatusOr<std::string> StringField(const element& e, What what) {
  if (e.type() != element_type::STRING) {
    return absl::InvalidArgumentError(
        absl::StrCat(what.first, what.second, " must be a string, got ", KindName(e)));
  }
  return std::string(e.get_string().value_unsafe());
}

absl::StatusOr<bool> BoolField(const element& e, What what) {
  if (e.type() != element_type::BOOL) {
    return absl::InvalidArgumentError(
        absl::StrCat(what.first, what.second, " must be true or false, got ", KindName(e)));
  }
  return e.get_bool().value_unsafe();
}

// The array `e` is (the caller checked its type). Copied out of the simdjson_result before use: a
// range-for over `e.get_array().value_unsafe()` would iterate a member of a destroyed temporary.
simdjson::dom::array AsArray(const element& e) {
  simdjson::dom::array array;
  if (e.get_array().get(array) != simdjson::SUCCESS) return {};
  return array;
}

// Counts the scalars of a flat or nested `data` array (a bare scalar counts as one).
int64_t CountElements(const element& e) {
  if (e.type() != element_type::ARRAY) return 1;
  int64_t n = 0;
  for (element child : AsArray(e)) n += CountElements(child);
  return n;
}

// Converts one JSON scalar to T, or explains why not.
template <typename T>
absl::Status Convert(const element& e, T* out) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (e.type() == element_type::STRING) {
      out->assign(e.get_string().value_unsafe());
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(KindName(e), " is not a string"));
  } else if constexpr (std::is_same_v<T, bool>) {
    if (e.type() == element_type::BOOL) {
      *out = e.get_bool().value_unsafe();
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(KindName(e), " is not a BOOL (true or false)"));
  } else if constexpr (std::is_floating_point_v<T>) {
    switch (e.type()) {
      case element_type::DOUBLE:
        *out = static_cast<T>(e.get_double().value_unsafe());
        return absl::OkStatus();
      case element_type::INT64:
        *out = static_cast<T>(e.get_int64().value_unsafe());
        return absl::OkStatus();
      case element_type::UINT64:
        *out = static_cast<T>(e.get_uint64().value_unsafe());
        return absl::OkStatus();
      default:
        return absl::InvalidArgumentError(absl::StrCat(KindName(e), " is not a number"));
    }
  } else {
    if (e.type() == element_type::INT64) {
      const int64_t v = e.get_int64().value_unsafe();
      if ((std::is_signed_v<T> && v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
           v <= static_cast<int64_t>(std::numeric_limits<T>::max())) ||
          (!std::is_signed_v<T> && v >= 0 &&
           static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
        *out = static_cast<T>(v);
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(absl::StrCat(v, " is out of range"));
    }
    if (e.type() == element_type::UINT64) {
      const uint64_t v = e.get_uint64().value_unsafe();
      if (v <= static_cast<uint64_t>(std::numeric_limits<T>::max())) {
        *out = static_cast<T>(v);
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(absl::StrCat(v, " is out of range"));
    }
    return absl::InvalidArgumentError(absl::StrCat(KindName(e), " is not an integer"));
  }
}

// Writes the scalars of `e` into out[*at ...] in row-major order.
template <typename T>
absl::Status Fill(const element& e, T* out, int64_t* at) {
  if (e.type() == element_type::ARRAY) {
    for (element child : AsArray(e)) LS_RETURN_IF_ERROR(Fill(child, out, at));
    return absl::OkStatus();
  }
  absl::Status status = Convert(e, &out[*at]);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("element ", *at, ": ", status.message()));
  }
  ++*at;
  return absl::OkStatus();
}

template <typename T>
absl::Status FillTensor(const element& data, Tensor* tensor) {
  int64_t at = 0;
  return Fill(data, tensor->mutable_data<T>(), &at);
}

// `data` -> a tensor of `dtype` and `shape`.
absl::StatusOr<Tensor> DecodeJsonData(const std::string& what, const element& data,
                                      absl::string_view datatype, DataType dtype,
                                      const engine::Shape& shape) {
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    return Invalid(what, absl::StrCat("datatype ", datatype,
                                      " cannot be sent as JSON numbers; send it as binary data "
                                      "(parameters.binary_data_size)"));
  }
  // Counted before anything is allocated for the shape.
  const int64_t count = CountElements(data);
  if (count != shape.NumElements()) {
    return Invalid(what, absl::StrCat("shape ", shape.ToString(), " needs ", shape.NumElements(),
                                      " elements, got ", count, " in data"));
  }
  Tensor tensor(dtype, shape);
  absl::Status filled;
  switch (dtype) {
    case DataType::kBool:
      filled = FillTensor<bool>(data, &tensor);
      break;
    case DataType::kInt8:
      filled = FillTensor<int8_t>(data, &tensor);
      break;
    case DataType::kInt16:
      filled = FillTensor<int16_t>(data, &tensor);
      break;
    case DataType::kInt32:
      filled = FillTensor<int32_t>(data, &tensor);
      break;
    case DataType::kInt64:
      filled = FillTensor<int64_t>(data, &tensor);
      break;
    case DataType::kUint8:
      filled = FillTensor<uint8_t>(data, &tensor);
      break;
    case DataType::kUint16:
      filled = FillTensor<uint16_t>(data, &tensor);
      break;
    case DataType::kUint32:
      filled = FillTensor<uint32_t>(data, &tensor);
      break;
    case DataType::kUint64:
      filled = FillTensor<uint64_t>(data, &tensor);
      break;
    case DataType::kFloat32:
      filled = FillTensor<float>(data, &tensor);
      break;
    case DataType::kFloat64:
      filled = FillTensor<double>(data, &tensor);
      break;
    case DataType::kString:
      filled = FillTensor<std::string>(data, &tensor);
      break;
    default:
      return Invalid(what, absl::StrCat("datatype ", datatype, " cannot be sent as JSON data"));
  }
  if (!filled.ok()) {
    return Invalid(what, absl::StrCat("data ", filled.message(), " (datatype ", datatype, ")"));
  }
  return tensor;
}

// ---- writing JSON ----

using JsonWriter = rapidjson::Writer<protocol::StringSink>;

// A number as std::to_chars prints it (shortest round trip); NaN and infinities as Python's json
// module writes and reads them (JSON itself has no spelling for them).
template <typename T>
void WriteNumber(JsonWriter& w, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) {
      w.RawValue("NaN", 3, rapidjson::kNumberType);
      return;
    }
    if (std::isinf(v)) {
      if (v > 0) {
        w.RawValue("Infinity", 8, rapidjson::kNumberType);
      } else {
        w.RawValue("-Infinity", 9, rapidjson::kNumberType);
      }
      return;
    }
  }
  if constexpr (std::is_same_v<T, bool>) {
    w.Bool(v);
  } else {
    char buf[32];
    const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
    w.RawValue(buf, static_cast<size_t>(r.ptr - buf), rapidjson::kNumberType);
  }
}

template <typename T>
void WriteData(JsonWriter& w, const Tensor& tensor) {
  w.StartArray();
  for (T v : tensor.span<T>()) WriteNumber(w, v);
  w.EndArray();
}

void WriteString(JsonWriter& w, absl::string_view s);

// The output's data as JSON; `name` is only for an error's message (no string built per
// output, or per streamed iteration).
absl::Status WriteTensorData(JsonWriter& w, absl::string_view name, const Tensor& tensor) {
  switch (tensor.dtype()) {
    case DataType::kBool:
      WriteData<bool>(w, tensor);
      return absl::OkStatus();
    case DataType::kInt8:
      WriteData<int8_t>(w, tensor);
      return absl::OkStatus();
    case DataType::kInt16:
      WriteData<int16_t>(w, tensor);
      return absl::OkStatus();
    case DataType::kInt32:
      WriteData<int32_t>(w, tensor);
      return absl::OkStatus();
    case DataType::kInt64:
      WriteData<int64_t>(w, tensor);
      return absl::OkStatus();
    case DataType::kUint8:
      WriteData<uint8_t>(w, tensor);
      return absl::OkStatus();
    case DataType::kUint16:
      WriteData<uint16_t>(w, tensor);
      return absl::OkStatus();
    case DataType::kUint32:
      WriteData<uint32_t>(w, tensor);
      return absl::OkStatus();
    case DataType::kUint64:
      WriteData<uint64_t>(w, tensor);
      return absl::OkStatus();
    case DataType::kFloat32:
      WriteData<float>(w, tensor);
      return absl::OkStatus();
    case DataType::kFloat64:
      WriteData<double>(w, tensor);
      return absl::OkStatus();
    case DataType::kString:
      // BYTES as JSON strings (Triton's JSON form); RapidJSON escapes what JSON requires.
      w.StartArray();
      for (const std::string& s : tensor.span<std::string>()) {
        if (s.size() > UINT32_MAX) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "output '", name, "': a BYTES element of ", s.size(), " bytes exceeds 4 GiB"));
        }
        WriteString(w, s);
      }
      w.EndArray();
      return absl::OkStatus();
    default:
      return Invalid(absl::StrCat("output '", name, "'"),
                     absl::StrCat("datatype ", KserveDataType(tensor.dtype()),
                                  " cannot be returned as JSON; ask for it as binary data "
                                  "(outputs[].parameters.binary_data: true)"));
  }
}

void WriteString(JsonWriter& w, absl::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

void WriteField(JsonWriter& w, const google::protobuf::Message& message,
                const google::protobuf::FieldDescriptor* field, int index);

void WriteMessage(JsonWriter& w, const google::protobuf::Message& message) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  // As Triton prints its JSON (protobuf's always_print_primitive_fields): scalars and repeated
  // fields always, even at their defaults (a scalar's metadata has "shape": [], an unused
  // statistic "count": 0); message and oneof fields when set.
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated() || !field->has_presence() || reflection->HasField(message, field)) {
      fields.push_back(field);
    }
  }
  w.StartObject();
  for (const google::protobuf::FieldDescriptor* field : fields) {
    WriteString(w, field->name());
    if (field->is_map()) {
      w.StartObject();
      const int n = reflection->FieldSize(message, field);
      for (int i = 0; i < n; ++i) {
        const google::protobuf::Message& entry = reflection->GetRepeatedMessage(message, field, i);
        const google::protobuf::Descriptor* d = entry.GetDescriptor();
        const google::protobuf::Reflection* r = entry.GetReflection();
        const google::protobuf::FieldDescriptor* key = d->FindFieldByNumber(1);
        std::string key_text;
        if (key->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
          key_text = r->GetString(entry, key);
        } else if (key->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_BOOL) {
          key_text = r->GetBool(entry, key) ? "true" : "false";
        } else if (key->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT32 ||
                   key->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT64) {
          key_text =
              absl::StrCat(key->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT32
                               ? r->GetInt32(entry, key)
                               : r->GetInt64(entry, key));
        } else {
          key_text =
              absl::StrCat(key->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT32
                               ? r->GetUInt32(entry, key)
                               : r->GetUInt64(entry, key));
        }
        WriteString(w, key_text);
        WriteField(w, entry, d->FindFieldByNumber(2), -1);
      }
      w.EndObject();
    } else if (field->is_repeated()) {
      w.StartArray();
      const int n = reflection->FieldSize(message, field);
      for (int i = 0; i < n; ++i) WriteField(w, message, field, i);
      w.EndArray();
    } else {
      WriteField(w, message, field, -1);
    }
  }
  w.EndObject();
}

// One value of `field` (element `index` of a repeated field, or the singular value for -1).
void WriteField(JsonWriter& w, const google::protobuf::Message& message,
                const google::protobuf::FieldDescriptor* field, int index) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = message.GetReflection();
  const bool rep = index >= 0;
  switch (field->cpp_type()) {
    case FD::CPPTYPE_INT32:
      w.Int(rep ? r->GetRepeatedInt32(message, field, index) : r->GetInt32(message, field));
      break;
    case FD::CPPTYPE_INT64:
      w.Int64(rep ? r->GetRepeatedInt64(message, field, index) : r->GetInt64(message, field));
      break;
    case FD::CPPTYPE_UINT32:
      w.Uint(rep ? r->GetRepeatedUInt32(message, field, index) : r->GetUInt32(message, field));
      break;
    case FD::CPPTYPE_UINT64:
      w.Uint64(rep ? r->GetRepeatedUInt64(message, field, index) : r->GetUInt64(message, field));
      break;
    case FD::CPPTYPE_DOUBLE:
      WriteNumber(w,
                  rep ? r->GetRepeatedDouble(message, field, index) : r->GetDouble(message, field));
      break;
    case FD::CPPTYPE_FLOAT:
      WriteNumber(w,
                  rep ? r->GetRepeatedFloat(message, field, index) : r->GetFloat(message, field));
      break;
    case FD::CPPTYPE_BOOL:
      w.Bool(rep ? r->GetRepeatedBool(message, field, index) : r->GetBool(message, field));
      break;
    case FD::CPPTYPE_ENUM: {
      const google::protobuf::EnumValueDescriptor* v =
          rep ? r->GetRepeatedEnum(message, field, index) : r->GetEnum(message, field);
      WriteString(w, v->name());
      break;
    }
    case FD::CPPTYPE_STRING: {
      const std::string s =
          rep ? r->GetRepeatedString(message, field, index) : r->GetString(message, field);
      WriteString(w, s);
      break;
    }
    case FD::CPPTYPE_MESSAGE:
      WriteMessage(
          w, rep ? r->GetRepeatedMessage(message, field, index) : r->GetMessage(message, field));
      break;
  }
}

}  // namespace

bool RestOutputs::Binary(absl::string_view name) const {
  for (const auto& [output, binary] : requested) {
    if (output == name) return binary;
  }
  return binary_default;
}

struct RestInferParser::Impl {
  simdjson::dom::parser parser;
};

RestInferParser::RestInferParser() : impl_(std::make_unique<Impl>()) {}
RestInferParser::~RestInferParser() = default;

namespace {

// The shared-memory parameters of a tensor's `params` object: false when it has none.
absl::StatusOr<bool> RestSharedMemoryRef(element params, const std::string& what,
                                         SharedMemoryRef* ref) {
  element region, offset, size;
  const bool has_region = params["shared_memory_region"].get(region) == simdjson::SUCCESS;
  const bool has_offset = params["shared_memory_offset"].get(offset) == simdjson::SUCCESS;
  const bool has_size = params["shared_memory_byte_size"].get(size) == simdjson::SUCCESS;
  if (!has_region) {
    if (has_offset || has_size) {
      return Invalid(what,
                     "shared_memory_offset/shared_memory_byte_size without shared_memory_region");
    }
    return false;
  }
  LS_ASSIGN_OR_RETURN(ref->region, StringField(region, What(what, ": shared_memory_region")));
  if (!has_size) return Invalid(what, "shared_memory_region needs shared_memory_byte_size");
  LS_ASSIGN_OR_RETURN(int64_t n, NonNegativeInt(size, What(what, ": shared_memory_byte_size")));
  ref->byte_size = static_cast<uint64_t>(n);
  ref->offset = 0;
  if (has_offset) {
    LS_ASSIGN_OR_RETURN(int64_t o, NonNegativeInt(offset, What(what, ": shared_memory_offset")));
    ref->offset = static_cast<uint64_t>(o);
  }
  return true;
}

// The request's `parameters` object: the timeout, streaming, sequence and binary-output settings.
absl::Status ParseRequestParameters(element field, InferenceRequest* request,
                                    RestOutputs* outputs) {
  if (field.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("'parameters' must be an object");
  }
  element p;
  if (field["timeout"].get(p) == simdjson::SUCCESS) {
    LS_ASSIGN_OR_RETURN(request->timeout_us,
                        NonNegativeInt(p, "parameter 'timeout' (microseconds)"));
  }
  if (field["stream_iterations"].get(p) == simdjson::SUCCESS) {
    LS_ASSIGN_OR_RETURN(request->stream_iterations, BoolField(p, "parameter 'stream_iterations'"));
  }
  if (field["sequence_id"].get(p) == simdjson::SUCCESS) {
    // Triton's clients send a number, or a string id.
    if (p.type() == element_type::STRING) {
      request->sequence.string_id = std::string(p.get_string().value_unsafe());
    } else if (p.type() == element_type::UINT64) {
      request->sequence.id = p.get_uint64().value_unsafe();
    } else if (p.type() == element_type::INT64 && p.get_int64().value_unsafe() >= 0) {
      request->sequence.id = static_cast<uint64_t>(p.get_int64().value_unsafe());
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter 'sequence_id' must be a non-negative integer or a string, got ", KindName(p)));
    }
  }
  if (field["sequence_start"].get(p) == simdjson::SUCCESS) {
    LS_ASSIGN_OR_RETURN(request->sequence.start, BoolField(p, "parameter 'sequence_start'"));
  }
  if (field["sequence_end"].get(p) == simdjson::SUCCESS) {
    LS_ASSIGN_OR_RETURN(request->sequence.end, BoolField(p, "parameter 'sequence_end'"));
  }
  if (field["binary_data_output"].get(p) == simdjson::SUCCESS) {
    LS_ASSIGN_OR_RETURN(outputs->binary_default, BoolField(p, "parameter 'binary_data_output'"));
  }
  return absl::OkStatus();
}

// Where an input's contents come from: shared memory, the body's binary part after the JSON
// (`binary` from `*binary_used` on, advanced past this input's bytes), or its JSON 'data'.
absl::Status BindInputData(element input, const std::string& what, absl::string_view binary,
                           size_t* binary_used, InferenceRequest* request, RestSharedMemory* shm) {
  InferenceRequest::Input& in = request->inputs.back();
  element data, params, size;
  const bool has_data = input["data"].get(data) == simdjson::SUCCESS;
  bool has_binary = false;
  bool in_shm = false;
  SharedMemoryRef ref;
  if (input["parameters"].get(params) == simdjson::SUCCESS) {
    if (params.type() != element_type::OBJECT) {
      return Invalid(what, "'parameters' must be an object");
    }
    has_binary = params["binary_data_size"].get(size) == simdjson::SUCCESS;
    LS_ASSIGN_OR_RETURN(in_shm, RestSharedMemoryRef(params, what, &ref));
  }
  if (in_shm) {
    if (has_data || has_binary) {
      return Invalid(what,
                     "has 'data' or binary_data_size although its data is in shared "
                     "memory");
    }
    if (shm == nullptr) return Invalid(what, "shared memory is not available on this endpoint");
    shm->inputs.emplace_back(request->inputs.size() - 1, std::move(ref));
  } else if (has_binary) {
    if (has_data) return Invalid(what, "has both 'data' and parameters.binary_data_size");
    LS_ASSIGN_OR_RETURN(int64_t n, NonNegativeInt(size, What(what, ": binary_data_size")));
    if (static_cast<uint64_t>(n) > binary.size() - *binary_used) {
      return Invalid(what, absl::StrCat("binary_data_size ", n,
                                        " runs past the end of the "
                                        "body: ",
                                        binary.size() - *binary_used,
                                        " bytes of binary data are left after the JSON header "
                                        "and the inputs before"));
    }
    in.raw = binary.substr(*binary_used, static_cast<size_t>(n));
    *binary_used += static_cast<size_t>(n);
  } else {
    if (!has_data) return Invalid(what, "has neither 'data' nor parameters.binary_data_size");
    in.decode = [data, datatype = in.datatype](const std::string& what, DataType dtype,
                                               const engine::Shape& shape) {
      return DecodeJsonData(what, data, datatype, dtype, shape);
    };
  }
  return absl::OkStatus();
}

// One element of 'inputs' (`at`: "inputs[2]"): its name, datatype and shape, then its data.
absl::Status ParseInput(element input, const std::string& at, absl::string_view binary,
                        size_t* binary_used, InferenceRequest* request, RestSharedMemory* shm) {
  if (input.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError(absl::StrCat(at, " must be an object"));
  }
  InferenceRequest::Input& in = request->inputs.emplace_back();
  element field;
  if (input["name"].get(field) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(at, " has no 'name'"));
  }
  LS_ASSIGN_OR_RETURN(in.name, StringField(field, What(at, ".name")));
  const std::string what = absl::StrCat("input ", QuoteUntrusted(in.name));
  if (input["datatype"].get(field) != simdjson::SUCCESS) {
    return Invalid(what, "has no 'datatype'");
  }
  LS_ASSIGN_OR_RETURN(in.datatype, StringField(field, What(what, ": 'datatype'")));
  simdjson::dom::array shape;
  if (input["shape"].get(field) != simdjson::SUCCESS) return Invalid(what, "has no 'shape'");
  if (field.get_array().get(shape) != simdjson::SUCCESS) {
    return Invalid(what, absl::StrCat("'shape' must be an array, got ", KindName(field)));
  }
  for (element d : shape) {
    LS_ASSIGN_OR_RETURN(int64_t dim, NonNegativeInt(d, What(what, ": each dim")));
    in.shape.push_back(dim);
  }
  return BindInputData(input, what, binary, binary_used, request, shm);
}

// The request's 'outputs' array: the names asked for, each binary or JSON, or in shared memory.
absl::Status ParseOutputs(element field, InferenceRequest* request, RestOutputs* outputs,
                          RestSharedMemory* shm) {
  simdjson::dom::array list;
  if (field.get_array().get(list) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("'outputs' must be an array, got ", KindName(field)));
  }
  int index = 0;
  for (element output : list) {
    const std::string at = absl::StrCat("outputs[", index++, "]");
    element name, params, p;
    if (output.type() != element_type::OBJECT || output["name"].get(name) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(absl::StrCat(at, " must be an object with a 'name'"));
    }
    LS_ASSIGN_OR_RETURN(std::string output_name, StringField(name, What(at, ".name")));
    bool binary_output = outputs->binary_default;
    if (output["parameters"].get(params) == simdjson::SUCCESS) {
      if (params.type() != element_type::OBJECT) {
        return absl::InvalidArgumentError(absl::StrCat(at, ".parameters must be an object"));
      }
      if (params["binary_data"].get(p) == simdjson::SUCCESS) {
        LS_ASSIGN_OR_RETURN(binary_output, BoolField(p, What(at, ".parameters.binary_data")));
      }
      if (params["classification"].get(p) == simdjson::SUCCESS) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ": the classification extension is not supported"));
      }
      SharedMemoryRef ref;
      const std::string what = absl::StrCat("output ", QuoteUntrusted(output_name));
      LS_ASSIGN_OR_RETURN(bool in_shm, RestSharedMemoryRef(params, what, &ref));
      if (in_shm) {
        if (shm == nullptr) return Invalid(what, "shared memory is not available on this endpoint");
        shm->outputs.emplace_back(output_name, std::move(ref));
      }
    }
    request->outputs.push_back(output_name);
    outputs->requested.emplace_back(std::move(output_name), binary_output);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestInferParser::Parse(absl::string_view endpoint, absl::string_view body,
                                    const char* header_length, InferenceRequest* request,
                                    RestOutputs* outputs, RestSharedMemory* shm) {
  if (impl_->parser.capacity() > kKeepBytes) impl_ = std::make_unique<Impl>();
  request->raw_field = "binary data";
  size_t json_length = body.size();
  if (header_length != nullptr) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(header_length, &n) || n > body.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          endpoint, ": Inference-Header-Content-Length ", QuoteUntrusted(header_length),
          " is not a byte count within the body of ", body.size(), " bytes"));
    }
    json_length = static_cast<size_t>(n);
  }
  const absl::string_view binary = body.substr(json_length);

  element root;
  const simdjson::error_code parsed =
      impl_->parser.parse(body.data(), json_length, /*realloc_if_needed=*/false).get(root);
  if (parsed != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        endpoint, ": the request body is not valid JSON (", simdjson::error_message(parsed),
        parsed == simdjson::NUMBER_ERROR ? "; numbers must fit a 64-bit integer or a double" : "",
        ")"));
  }
  if (root.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError(
        absl::StrCat(endpoint, ": the request body must be a JSON object, got ", KindName(root)));
  }
  element field;
  if (root["id"].get(field) == simdjson::SUCCESS) {
    LS_ASSIGN_OR_RETURN(request->id, StringField(field, "'id'"));
  }
  if (root["parameters"].get(field) == simdjson::SUCCESS) {
    LS_RETURN_IF_ERROR(ParseRequestParameters(field, request, outputs));
  }

  simdjson::dom::array inputs;
  if (root["inputs"].get(field) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(endpoint, ": the request has no 'inputs'"));
  }
  if (field.get_array().get(inputs) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("'inputs' must be an array, got ", KindName(field)));
  }
  size_t binary_used = 0;
  int index = 0;
  for (element input : inputs) {
    LS_RETURN_IF_ERROR(ParseInput(input, absl::StrCat("inputs[", index++, "]"), binary,
                                  &binary_used, request, shm));
  }
  if (binary_used != binary.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body has ", binary.size(), " bytes of binary data after the ", json_length,
        "-byte JSON header, but the inputs' binary_data_size add up to ", binary_used));
  }
  if (root["outputs"].get(field) == simdjson::SUCCESS) {
    LS_RETURN_IF_ERROR(ParseOutputs(field, request, outputs, shm));
  }
  return absl::OkStatus();
}

namespace {

// The response's head: model_name, model_version, id and (for a streamed response) parameters.
void WriteResponseHead(JsonWriter& w, absl::string_view model_name, absl::string_view model_version,
                       absl::string_view id, const RestStreamParameters* stream) {
  w.Key("model_name");
  WriteString(w, model_name);
  w.Key("model_version");
  WriteString(w, model_version);
  if (!id.empty()) {
    w.Key("id");
    WriteString(w, id);
  }
  if (stream != nullptr) {
    w.Key("parameters");
    w.StartObject();
    if (stream->iteration >= 0) {
      w.Key("iteration");
      w.Int64(stream->iteration);
    }
    w.Key("triton_final_response");
    w.Bool(stream->final_response);
    w.EndObject();
  }
}

// One output's name, datatype and shape (the caller writes data or parameters and closes it).
absl::Status WriteOutputHead(JsonWriter& w, const std::string& name, const Tensor& tensor) {
  const absl::string_view datatype = KserveDataType(tensor.dtype());
  if (datatype.empty()) {
    return absl::InternalError(absl::StrCat("output '", name, "': undefined element type"));
  }
  w.StartObject();
  w.Key("name");
  WriteString(w, name);
  w.Key("datatype");
  WriteString(w, datatype);
  w.Key("shape");
  w.StartArray();
  for (int64_t d : tensor.shape().dims()) w.Int64(d);
  w.EndArray();
  return absl::OkStatus();
}

}  // namespace

absl::Status EncodeRestSlices(const engine::Model& model, absl::string_view model_name,
                              absl::string_view model_version, absl::string_view id,
                              int64_t iteration, absl::Span<const engine::ScanSlice> slices,
                              std::string* json) {
  json->clear();
  protocol::StringSink out{json};
  JsonWriter w(out);
  w.StartObject();
  const RestStreamParameters stream{iteration, /*final_response=*/false};
  WriteResponseHead(w, model_name, model_version, id, &stream);
  w.Key("outputs");
  w.StartArray();
  for (const engine::ScanSlice& slice : slices) {
    const std::string& name = model.outputs()[slice.output].name;
    LS_RETURN_IF_ERROR(WriteOutputHead(w, name, *slice.tensor));
    w.Key("data");
    LS_RETURN_IF_ERROR(WriteTensorData(w, name, *slice.tensor));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return absl::OkStatus();
}

absl::Status EncodeRestResponse(const engine::Model& model, absl::string_view model_name,
                                absl::string_view model_version, absl::string_view id,
                                const std::vector<int>& outputs,
                                const std::vector<engine::Value>& values, const RestOutputs& binary,
                                std::string* body, size_t* json_length,
                                const RestStreamParameters* stream,
                                const SharedMemoryBindings* shm) {
  std::string& json = *body;
  json.clear();
  protocol::StringSink out{&json};
  JsonWriter w(out);
  // Written after the JSON: output names and tensors (no string, no allocation for a few).
  absl::InlinedVector<std::pair<const std::string*, const Tensor*>, 8> blobs;
  size_t blob_bytes = 0;
  w.StartObject();
  WriteResponseHead(w, model_name, model_version, id, stream);
  w.Key("outputs");
  w.StartArray();
  for (int index : outputs) {
    const std::string& name = model.outputs()[index].name;
    const engine::Value& value = values[index];
    if (!value.is_tensor()) {
      return absl::UnimplementedError(absl::StrCat(
          "output '", name, "': ", value.is_sequence() ? "a sequence" : "an empty optional",
          " cannot be returned over KServe v2"));
    }
    const Tensor& tensor = value.tensor();
    LS_RETURN_IF_ERROR(WriteOutputHead(w, name, tensor));
    const SharedMemoryView* view = shm == nullptr ? nullptr : shm->Output(name);
    if (view != nullptr) {
      LS_ASSIGN_OR_RETURN(size_t written, WriteTensorToSharedMemory(
                                              absl::StrCat("output '", name, "'"), tensor, *view));
      w.Key("parameters");
      w.StartObject();
      w.Key("shared_memory_region");
      w.String(view->region->name().data(),
               static_cast<rapidjson::SizeType>(view->region->name().size()));
      w.Key("shared_memory_byte_size");
      w.Uint64(written);
      w.EndObject();
    } else if (binary.Binary(name)) {
      const size_t size = RawTensorSize(tensor);
      blobs.emplace_back(&name, &tensor);
      blob_bytes += size;
      w.Key("parameters");
      w.StartObject();
      w.Key("binary_data_size");
      w.Uint64(size);
      w.EndObject();
    } else {
      w.Key("data");
      LS_RETURN_IF_ERROR(WriteTensorData(w, name, tensor));
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  *json_length = json.size();
  json.reserve(json.size() + blob_bytes);
  for (const auto& [name, tensor] : blobs) {
    // The name is only needed for a BYTES element's error.
    const std::string what = tensor->dtype() == engine::DataType::kString
                                 ? absl::StrCat("output '", *name, "'")
                                 : std::string();
    LS_RETURN_IF_ERROR(AppendRawTensor(what, *tensor, &json));
  }
  return absl::OkStatus();
}

std::string ProtoToJson(const google::protobuf::Message& message) {
  std::string json;
  protocol::StringSink out{&json};
  JsonWriter w(out);
  WriteMessage(w, message);
  return json;
}

namespace {

// `body` as a JSON object (nullopt-like empty element for an empty body); `what` names the
// request in messages.
absl::StatusOr<bool> ParseSmallObject(absl::string_view body, absl::string_view what,
                                      absl::string_view key, bool* found, element* value,
                                      simdjson::dom::parser& parser) {
  *found = false;
  if (absl::StripAsciiWhitespace(body).empty()) return true;
  element root;
  const simdjson::error_code parsed = parser.parse(body.data(), body.size()).get(root);
  if (parsed != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the request body is not valid JSON (",
                                                   simdjson::error_message(parsed), ")"));
  }
  if (root.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the request body must be a JSON object, got ", KindName(root)));
  }
  *found = root[std::string_view(key.data(), key.size())].get(*value) == simdjson::SUCCESS;
  return true;
}

}  // namespace

absl::StatusOr<bool> ParseIndexBody(absl::string_view body) {
  simdjson::dom::parser parser;
  bool found = false;
  element ready;
  LS_RETURN_IF_ERROR(
      ParseSmallObject(body, "RepositoryIndex", "ready", &found, &ready, parser).status());
  if (!found) return false;
  return BoolField(ready, "RepositoryIndex: 'ready'");
}

absl::StatusOr<LoadParameters> ParseLoadBody(absl::string_view body) {
  simdjson::dom::parser parser;
  bool found = false;
  element parameters;
  LS_RETURN_IF_ERROR(
      ParseSmallObject(body, "RepositoryModelLoad", "parameters", &found, &parameters, parser)
          .status());
  LoadParameters out;
  if (!found) return out;
  if (parameters.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("RepositoryModelLoad: 'parameters' must be an object");
  }
  simdjson::dom::object object;
  if (parameters.get_object().get(object) != simdjson::SUCCESS) return out;
  for (auto [key, value] : object) {
    const std::string name(key);
    if (name == "config") {
      LS_ASSIGN_OR_RETURN(out.config_json, StringField(value, "RepositoryModelLoad: 'config'"));
    } else if (absl::StartsWith(name, "file:")) {
      LS_ASSIGN_OR_RETURN(
          std::string encoded,
          StringField(value, absl::StrCat("RepositoryModelLoad: ", QuoteUntrusted(name))));
      std::string contents;
      if (!absl::Base64Unescape(encoded, &contents)) {
        return absl::InvalidArgumentError(
            absl::StrCat("RepositoryModelLoad: ", QuoteUntrusted(name), " must be base64-encoded"));
      }
      out.files.emplace_back(name.substr(5), std::move(contents));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("RepositoryModelLoad: parameter ",
                                                     QuoteUntrusted(name),
                                                     " is neither 'config' nor 'file:<path>'"));
    }
  }
  return out;
}

absl::StatusOr<SharedMemoryRegistration> ParseSharedMemoryRegisterBody(absl::string_view body) {
  simdjson::dom::parser parser;
  element root;
  const simdjson::error_code parsed = parser.parse(body.data(), body.size()).get(root);
  if (parsed != simdjson::SUCCESS || root.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError(
        "SystemSharedMemoryRegister: the body must be a JSON object {\"key\", \"offset\", "
        "\"byte_size\"}");
  }
  SharedMemoryRegistration out;
  element field;
  if (root["key"].get(field) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("SystemSharedMemoryRegister: the body needs 'key'");
  }
  LS_ASSIGN_OR_RETURN(out.key, StringField(field, "SystemSharedMemoryRegister: 'key'"));
  if (root["offset"].get(field) == simdjson::SUCCESS) {
    LS_ASSIGN_OR_RETURN(int64_t offset,
                        NonNegativeInt(field, "SystemSharedMemoryRegister: 'offset'"));
    out.offset = static_cast<uint64_t>(offset);
  }
  if (root["byte_size"].get(field) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("SystemSharedMemoryRegister: the body needs 'byte_size'");
  }
  LS_ASSIGN_OR_RETURN(int64_t size,
                      NonNegativeInt(field, "SystemSharedMemoryRegister: 'byte_size'"));
  out.byte_size = static_cast<uint64_t>(size);
  return out;
}

namespace {

// The dims of a nested JSON array (a scalar: none); the first element's at each level (the
// KServe parser checks the element count against the shape).
std::vector<int64_t> NestedDims(element e) {
  std::vector<int64_t> dims;
  while (e.type() == element_type::ARRAY) {
    simdjson::dom::array array = AsArray(e);
    dims.push_back(static_cast<int64_t>(array.size()));
    if (array.size() == 0) break;
    e = *array.begin();
  }
  return dims;
}

void WriteRaw(JsonWriter& w, const element& e) {
  const std::string text = simdjson::minify(e);
  w.RawValue(text.data(), text.size(), rapidjson::kObjectType);
}

}  // namespace

bool IsFlatGenerateBody(absl::string_view body) {
  simdjson::dom::parser parser;
  element root, inputs;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS ||
      root.type() != element_type::OBJECT) {
    return false;
  }
  return root["inputs"].get(inputs) != simdjson::SUCCESS;
}

absl::StatusOr<std::string> GenerateToInferBody(absl::string_view body,
                                                const inference::ModelMetadataResponse& metadata) {
  simdjson::dom::parser parser;
  element root;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS ||
      root.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("generate: the request body must be a JSON object");
  }
  std::string json;
  protocol::StringSink out{&json};
  JsonWriter w(out);
  w.StartObject();
  simdjson::dom::object object;
  if (root.get_object().get(object) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("generate: the request body must be a JSON object");
  }
  w.Key("inputs");
  w.StartArray();
  for (auto [key, value] : object) {
    if (key == "id" || key == "parameters") continue;
    const inference::ModelMetadataResponse::TensorMetadata* input = nullptr;
    for (const auto& candidate : metadata.inputs()) {
      if (candidate.name() == key) input = &candidate;
    }
    if (input == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("generate: ", QuoteUntrusted(absl::string_view(key.data(), key.size())),
                       " is not an input of model ", QuoteUntrusted(metadata.name())));
    }
    std::vector<int64_t> dims = NestedDims(value);
    while (dims.size() < static_cast<size_t>(input->shape_size())) dims.insert(dims.begin(), 1);
    w.StartObject();
    w.Key("name");
    WriteString(w, input->name());
    w.Key("datatype");
    WriteString(w, input->datatype());
    w.Key("shape");
    w.StartArray();
    for (int64_t d : dims) w.Int64(d);
    w.EndArray();
    w.Key("data");
    if (value.type() == element_type::ARRAY) {
      WriteRaw(w, value);
    } else {
      w.StartArray();
      WriteRaw(w, value);
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  for (const char* kept : {"id", "parameters"}) {
    element value;
    if (root[kept].get(value) == simdjson::SUCCESS) {
      w.Key(kept);
      WriteRaw(w, value);
    }
  }
  w.EndObject();
  return json;
}

absl::StatusOr<std::string> InferToGenerateResponse(absl::string_view response) {
  simdjson::dom::parser parser;
  element root;
  if (parser.parse(response.data(), response.size()).get(root) != simdjson::SUCCESS ||
      root.type() != element_type::OBJECT) {
    return absl::InternalError("generate: the response is not a JSON object");
  }
  std::string json;
  protocol::StringSink out{&json};
  JsonWriter w(out);
  w.StartObject();
  simdjson::dom::object object;
  if (root.get_object().get(object) != simdjson::SUCCESS) {
    return absl::InternalError("generate: the response is not a JSON object");
  }
  for (auto [key, value] : object) {
    if (key == "outputs") continue;
    w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
    WriteRaw(w, value);
  }
  element outputs;
  if (root["outputs"].get(outputs) == simdjson::SUCCESS) {
    for (element output : AsArray(outputs)) {
      element name, data;
      if (output["name"].get(name) != simdjson::SUCCESS ||
          output["data"].get(data) != simdjson::SUCCESS) {
        continue;  // a binary or shared-memory output: nothing to put inline
      }
      const std::string_view key = name.get_string().value_unsafe();
      w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
      simdjson::dom::array array = AsArray(data);
      if (array.size() == 1) {
        WriteRaw(w, *array.begin());
      } else {
        WriteRaw(w, data);
      }
    }
  }
  w.EndObject();
  return json;
}

absl::StatusOr<LogSettingList> ParseLogSettingsBody(absl::string_view body) {
  simdjson::dom::parser parser;
  element root;
  simdjson::dom::object object;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS ||
      root.get_object().get(object) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("/v2/logging: the body must be a JSON object of settings");
  }
  LogSettingList changes;
  for (auto [key, value] : object) {
    std::string name(key);
    if (value.type() == element_type::BOOL) {
      changes.emplace_back(std::move(name), value.get_bool().value_unsafe());
    } else if (value.type() == element_type::STRING) {
      changes.emplace_back(std::move(name), std::string(value.get_string().value_unsafe()));
    } else {
      LS_ASSIGN_OR_RETURN(
          int64_t n, NonNegativeInt(value, absl::StrCat("log setting ", QuoteUntrusted(name))));
      if (n > std::numeric_limits<uint32_t>::max()) {
        return absl::InvalidArgumentError(
            absl::StrCat("log setting ", QuoteUntrusted(name), " is out of range"));
      }
      changes.emplace_back(std::move(name), static_cast<uint32_t>(n));
    }
  }
  return changes;
}

std::string LogSettingsJson(const LogSettingList& settings) {
  std::string json;
  protocol::StringSink out{&json};
  JsonWriter w(out);
  w.StartObject();
  for (const auto& [name, value] : settings) {
    WriteString(w, name);
    if (const bool* b = std::get_if<bool>(&value)) w.Bool(*b);
    if (const uint32_t* u = std::get_if<uint32_t>(&value)) w.Uint(*u);
    if (const std::string* s = std::get_if<std::string>(&value)) WriteString(w, *s);
  }
  w.EndObject();
  return json;
}

absl::StatusOr<TraceSettingList> ParseTraceSettingsBody(absl::string_view body) {
  simdjson::dom::parser parser;
  element root;
  simdjson::dom::object object;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS ||
      root.get_object().get(object) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        "/v2/trace/setting: the body must be a JSON object of settings");
  }
  TraceSettingList changes;
  for (auto [key, value] : object) {
    std::vector<std::string> values;
    const std::string what = absl::StrCat("trace setting ", QuoteUntrusted(std::string(key)));
    if (value.type() == element_type::ARRAY) {
      for (element v : AsArray(value)) {
        LS_ASSIGN_OR_RETURN(std::string s, StringField(v, what));
        values.push_back(std::move(s));
      }
    } else if (value.type() != element_type::NULL_VALUE) {
      LS_ASSIGN_OR_RETURN(std::string s, StringField(value, what));
      values.push_back(std::move(s));
    }
    changes.emplace_back(std::string(key), std::move(values));
  }
  return changes;
}

std::string TraceSettingsJson(const TraceSettingList& settings) {
  std::string json;
  protocol::StringSink out{&json};
  JsonWriter w(out);
  w.StartObject();
  for (const auto& [name, values] : settings) {
    WriteString(w, name);
    if (values.size() == 1 && name != "trace_level") {
      WriteString(w, values[0]);
    } else {
      w.StartArray();
      for (const std::string& v : values) WriteString(w, v);
      w.EndArray();
    }
  }
  w.EndObject();
  return json;
}

std::string ErrorJson(absl::string_view message) {
  std::string json;
  protocol::StringSink out{&json};
  JsonWriter w(out);
  w.StartObject();
  w.Key("error");
  const std::string bounded = BoundMessage(message);
  WriteString(w, bounded);
  w.EndObject();
  return json;
}

}  // namespace loopserve::server
