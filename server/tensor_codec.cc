#include "server/tensor_codec.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
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
    default:
      break;
  }
  return absl::InternalError(absl::StrCat(what, ": unhandled datatype ", datatype));
}

absl::StatusOr<Tensor> DecodeRaw(const std::string& what, const std::string& bytes, DataType dtype,
                                 const engine::Shape& shape) {
  const size_t element_size = engine::DataTypeSize(dtype);
  // ValidateDims bounds the element count by 2^40, so this product cannot overflow.
  const uint64_t expected = static_cast<uint64_t>(shape.NumElements()) * element_size;
  if (bytes.size() != expected) {
    return Invalid(
        what, absl::StrCat("shape ", shape.ToString(), " of ", engine::DataTypeName(dtype),
                           " needs ", expected, " bytes, raw_input_contents has ", bytes.size()));
  }
  // A view avoids copying large tensors; kernels may read elements as T, so the bytes must be
  // aligned for T. Protobuf usually, but not always, hands out suitably aligned string storage.
  if (reinterpret_cast<uintptr_t>(bytes.data()) % element_size == 0) {
    return Tensor::View(dtype, shape, bytes.data());
  }
  Tensor tensor(dtype, shape);
  if (expected > 0) std::memcpy(tensor.mutable_raw_data(), bytes.data(), expected);
  return tensor;
}

}  // namespace

absl::Status ParseInferRequest(grpc::ByteBuffer& bytes, inference::ModelInferRequest* request) {
  const size_t size = bytes.Valid() ? bytes.Length() : 0;
  bool parsed = true;
  if (size > 0) {
    grpc::ProtoBufferReader reader(&bytes);
    parsed = reader.status().ok() && request->ParseFromZeroCopyStream(&reader);
  }
  bytes.Clear();
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat("ModelInfer: the request (", size,
                     " bytes) is not a valid inference.ModelInferRequest message"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DecodedRequest> DecodeInferRequest(const inference::ModelInferRequest& request,
                                                  const engine::Model& model) {
  const auto& specs = model.inputs();
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(),
                     " entries but the request has ", request.inputs_size(),
                     " inputs; give one entry per input, in order"));
  }

  DecodedRequest decoded;
  decoded.inputs.resize(specs.size());
  std::vector<bool> seen(specs.size(), false);
  for (int i = 0; i < request.inputs_size(); ++i) {
    const InputTensor& input = request.inputs(i);
    const std::string what = absl::StrCat("input ", QuoteUntrusted(input.name()));
    const int index = model.FindInput(input.name());
    if (index < 0) return Invalid(what, "the model has no such input");
    if (seen[index]) return Invalid(what, "given more than once");
    seen[index] = true;
    const engine::TensorSpec& spec = specs[index];
    if (spec.type.kind == engine::ValueKind::kSequence) {
      return Invalid(what, "is a sequence, which KServe v2 cannot carry");
    }

    auto dtype = DataTypeFromKserve(input.datatype());
    if (!dtype.ok()) return Invalid(what, dtype.status().message());
    if (spec.type.dtype != DataType::kUndefined && *dtype != spec.type.dtype) {
      return Invalid(what,
                     absl::StrCat("datatype ", input.datatype(), " does not match the model's ",
                                  KserveDataType(spec.type.dtype)));
    }
    LS_ASSIGN_OR_RETURN(engine::Shape shape, engine::ValidateDims(input.shape(), what));

    const bool typed = HasTypedContents(input);
    if (raw && typed) {
      return Invalid(what,
                     "has typed contents although raw_input_contents is used; use one or "
                     "the other for all inputs");
    }
    absl::StatusOr<Tensor> tensor =
        raw ? DecodeRaw(what, request.raw_input_contents(i), *dtype, shape)
            : DecodeTyped(what, input, input.datatype(), *dtype, shape);
    if (!tensor.ok()) return tensor.status();
    decoded.inputs[index] = Value(*std::move(tensor));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!seen[i] && specs[i].type.kind != engine::ValueKind::kOptional) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", specs[i].name, "': missing from the request"));
    }
  }

  if (request.outputs_size() == 0) {
    for (size_t i = 0; i < model.outputs().size(); ++i)
      decoded.outputs.push_back(static_cast<int>(i));
  } else {
    std::vector<bool> requested(model.outputs().size(), false);
    for (const auto& output : request.outputs()) {
      const std::string what = absl::StrCat("output ", QuoteUntrusted(output.name()));
      const int index = model.FindOutput(output.name());
      if (index < 0) return Invalid(what, "the model has no such output");
      if (requested[index]) return Invalid(what, "requested more than once");
      requested[index] = true;
      decoded.outputs.push_back(index);
    }
  }
  return decoded;
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
    const Tensor& tensor = value.tensor();
    const absl::string_view datatype = KserveDataType(tensor.dtype());
    if (datatype.empty()) {
      return absl::InternalError(absl::StrCat("output '", name, "': undefined element type"));
    }
    auto* out = response->add_outputs();
    out->set_name(name);
    out->set_datatype(std::string(datatype));
    for (int64_t d : tensor.shape().dims()) out->add_shape(d);
    const auto* data = static_cast<const char*>(tensor.raw_data());
    response->add_raw_output_contents()->assign(data == nullptr ? "" : data,
                                                data == nullptr ? 0 : tensor.ByteSize());
  }
  return absl::OkStatus();
}

}  // namespace loopserve::server
