#include "server/grpc/tensor_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tensor/shape.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/datatype.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

using engine::DataType;
using engine::Tensor;
using engine::Value;
using InputTensor = inference::ModelInferRequest::InferInputTensor;

absl::Status Invalid(absl::string_view what, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

bool HasTypedContents(const InputTensor& input) {
  if (!input.has_contents()) return false;
  const inference::InferTensorContents& c = input.contents();
  return c.bool_contents_size() > 0 || c.int_contents_size() > 0 || c.int64_contents_size() > 0 ||
         c.uint_contents_size() > 0 || c.uint64_contents_size() > 0 || c.fp32_contents_size() > 0 ||
         c.fp64_contents_size() > 0 || c.bytes_contents_size() > 0;
}

// The number of elements in each typed-contents field, by field name.
struct FieldCount {
  const char* name;
  int size;
};

// Copies a repeated proto field into an owned tensor of element type T after checking the count.
template <typename T, typename Field>
absl::StatusOr<Tensor> CopyTyped(const std::string& what, const Field& field,
                                 const char* field_name, DataType dtype,
                                 const engine::Shape& shape) {
  const int64_t expected = shape.NumElements();
  if (static_cast<int64_t>(field.size()) != expected) {
    return Invalid(what, absl::StrCat("shape ", shape.ToString(), " needs ", expected,
                                      " elements, got ", field.size(), " in ", field_name));
  }
  Tensor tensor(dtype, shape);
  T* out = tensor.mutable_data<T>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<T>(field.Get(i));
  return tensor;
}

absl::StatusOr<Tensor> DecodeTyped(const std::string& what, const InputTensor& input,
                                   absl::string_view datatype, DataType dtype,
                                   const engine::Shape& shape) {
  const inference::InferTensorContents& c = input.contents();
  // The field that may carry this datatype; every other field must be empty.
  const char* expected_field = nullptr;
  switch (dtype) {
    case DataType::kBool:
      expected_field = "bool_contents";
      break;
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
      expected_field = "int_contents";
      break;
    case DataType::kInt64:
      expected_field = "int64_contents";
      break;
    case DataType::kUint8:
    case DataType::kUint16:
    case DataType::kUint32:
      expected_field = "uint_contents";
      break;
    case DataType::kUint64:
      expected_field = "uint64_contents";
      break;
    case DataType::kFloat32:
      expected_field = "fp32_contents";
      break;
    case DataType::kFloat64:
      expected_field = "fp64_contents";
      break;
    case DataType::kString:
      expected_field = "bytes_contents";
      break;
    default:
      return Invalid(what,
                     absl::StrCat("datatype ", datatype,
                                  " has no typed contents field; send it in raw_input_contents"));
  }
  const FieldCount fields[] = {
      {"bool_contents", c.bool_contents_size()},     {"int_contents", c.int_contents_size()},
      {"int64_contents", c.int64_contents_size()},   {"uint_contents", c.uint_contents_size()},
      {"uint64_contents", c.uint64_contents_size()}, {"fp32_contents", c.fp32_contents_size()},
      {"fp64_contents", c.fp64_contents_size()},     {"bytes_contents", c.bytes_contents_size()},
  };
  for (const FieldCount& field : fields) {
    if (field.size > 0 && std::strcmp(field.name, expected_field) != 0) {
      return Invalid(what, absl::StrCat("datatype ", datatype, " expects ", expected_field,
                                        ", got ", field.name));
    }
  }
  switch (dtype) {
    case DataType::kBool:
      return CopyTyped<bool>(what, c.bool_contents(), expected_field, dtype, shape);
    case DataType::kInt8:
      return CopyTyped<int8_t>(what, c.int_contents(), expected_field, dtype, shape);
    case DataType::kInt16:
      return CopyTyped<int16_t>(what, c.int_contents(), expected_field, dtype, shape);
    case DataType::kInt32:
      return CopyTyped<int32_t>(what, c.int_contents(), expected_field, dtype, shape);
    case DataType::kInt64:
      return CopyTyped<int64_t>(what, c.int64_contents(), expected_field, dtype, shape);
    case DataType::kUint8:
      return CopyTyped<uint8_t>(what, c.uint_contents(), expected_field, dtype, shape);
    case DataType::kUint16:
      return CopyTyped<uint16_t>(what, c.uint_contents(), expected_field, dtype, shape);
    case DataType::kUint32:
      return CopyTyped<uint32_t>(what, c.uint_contents(), expected_field, dtype, shape);
    case DataType::kUint64:
      return CopyTyped<uint64_t>(what, c.uint64_contents(), expected_field, dtype, shape);
    case DataType::kFloat32:
      return CopyTyped<float>(what, c.fp32_contents(), expected_field, dtype, shape);
    case DataType::kFloat64:
      return CopyTyped<double>(what, c.fp64_contents(), expected_field, dtype, shape);
    case DataType::kString:
      return CopyTyped<std::string>(what, c.bytes_contents(), expected_field, dtype, shape);
    default:
      break;
  }
  return absl::InternalError(absl::StrCat(what, ": unhandled datatype ", datatype));
}

}  // namespace

absl::Status ParseInferRequest(grpc::ByteBuffer& bytes, absl::string_view rpc,
                               inference::ModelInferRequest* request) {
  const size_t size = bytes.Valid() ? bytes.Length() : 0;
  bool parsed = true;
  if (size > 0) {
    grpc::ProtoBufferReader reader(&bytes);
    parsed = reader.status().ok() && request->ParseFromZeroCopyStream(&reader);
  }
  bytes.Clear();
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat(rpc, ": the request (", size,
                     " bytes) is not a valid inference.ModelInferRequest message"));
  }
  return absl::OkStatus();
}

absl::Status ToInferenceRequest(const inference::ModelInferRequest& request,
                                InferenceRequest* out) {
  out->model_name = request.model_name();
  out->model_version = request.model_version();
  out->id = request.id();
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(),
                     " entries but the request has ", request.inputs_size(),
                     " inputs; give one entry per input, in order"));
  }
  out->inputs.reserve(request.inputs_size());
  for (int i = 0; i < request.inputs_size(); ++i) {
    const InputTensor& input = request.inputs(i);
    if (raw && HasTypedContents(input)) {
      return Invalid(absl::StrCat("input ", QuoteUntrusted(input.name())),
                     "has typed contents although raw_input_contents is used; use one or "
                     "the other for all inputs");
    }
    InferenceRequest::Input& in = out->inputs.emplace_back();
    in.name = input.name();
    in.datatype = input.datatype();
    in.shape.assign(input.shape().begin(), input.shape().end());
    if (raw) {
      in.raw = request.raw_input_contents(i);
    } else {
      in.decode = [&input](const std::string& what, DataType dtype, const engine::Shape& shape) {
        return DecodeTyped(what, input, input.datatype(), dtype, shape);
      };
    }
  }
  for (const auto& output : request.outputs()) out->outputs.push_back(output.name());

  auto it = request.parameters().find("timeout");
  if (it != request.parameters().end()) {
    // Triton's per-request `timeout` parameter (microseconds; 0 = none).
    const inference::InferParameter& p = it->second;
    int64_t micros = -1;
    if (p.parameter_choice_case() == inference::InferParameter::kInt64Param) {
      micros = p.int64_param();
    } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      micros = static_cast<int64_t>(
          std::min<uint64_t>(p.uint64_param(), std::numeric_limits<int64_t>::max()));
    }
    if (micros < 0) {
      return absl::InvalidArgumentError(
          "parameter 'timeout' must be a non-negative int64 (microseconds)");
    }
    out->timeout_us = micros;
  }
  it = request.parameters().find("stream_iterations");
  if (it != request.parameters().end()) {
    if (it->second.parameter_choice_case() != inference::InferParameter::kBoolParam) {
      return absl::InvalidArgumentError("parameter 'stream_iterations' must be a bool");
    }
    out->stream_iterations = it->second.bool_param();
  }
  // Triton's sequence parameters: the id as int64 / uint64 or a string; start and end as bools.
  it = request.parameters().find("sequence_id");
  if (it != request.parameters().end()) {
    const inference::InferParameter& p = it->second;
    if (p.parameter_choice_case() == inference::InferParameter::kInt64Param &&
        p.int64_param() >= 0) {
      out->sequence.id = static_cast<uint64_t>(p.int64_param());
    } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      out->sequence.id = p.uint64_param();
    } else if (p.parameter_choice_case() == inference::InferParameter::kStringParam) {
      out->sequence.string_id = p.string_param();
    } else {
      return absl::InvalidArgumentError(
          "parameter 'sequence_id' must be a non-negative int64, a uint64 or a string");
    }
  }
  for (auto [name, flag] : {std::pair<const char*, bool*>{"sequence_start", &out->sequence.start},
                            {"sequence_end", &out->sequence.end}}) {
    it = request.parameters().find(name);
    if (it == request.parameters().end()) continue;
    if (it->second.parameter_choice_case() != inference::InferParameter::kBoolParam) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be a bool"));
    }
    *flag = it->second.bool_param();
  }
  return absl::OkStatus();
}

absl::StatusOr<DecodedRequest> DecodeInferRequest(const inference::ModelInferRequest& request,
                                                  const engine::Model& model) {
  InferenceRequest decoded;
  LS_RETURN_IF_ERROR(ToInferenceRequest(request, &decoded));
  return BindRequest(decoded, model);
}

absl::Status EncodeInferOutputs(const engine::Model& model, const std::vector<int>& outputs,
                                const std::vector<engine::Value>& values,
                                inference::ModelInferResponse* response) {
  for (int index : outputs) {
    const std::string& name = model.outputs()[index].name;
    const Value& value = values[index];
    if (!value.is_tensor()) {
      return absl::UnimplementedError(absl::StrCat(
          "output '", name, "': ", value.is_sequence() ? "a sequence" : "an empty optional",
          " cannot be returned over KServe v2"));
    }
    LS_RETURN_IF_ERROR(EncodeOutputTensor(name, value.tensor(), response));
  }
  return absl::OkStatus();
}

absl::Status EncodeOutputTensor(const std::string& name, const Tensor& tensor,
                                inference::ModelInferResponse* response) {
  const absl::string_view datatype = KserveDataType(tensor.dtype());
  if (datatype.empty()) {
    return absl::InternalError(absl::StrCat("output '", name, "': undefined element type"));
  }
  auto* out = response->add_outputs();
  out->set_name(name);
  out->set_datatype(std::string(datatype));
  for (int64_t d : tensor.shape().dims()) out->add_shape(d);
  return AppendRawTensor(absl::StrCat("output '", name, "'"), tensor,
                         response->add_raw_output_contents());
}

}  // namespace loopserve::server
