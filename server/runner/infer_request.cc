#include "server/runner/infer_request.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tensor/shape.h"
#include "protocol/bytes.h"
#include "server/datatype.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

using engine::DataType;
using engine::Tensor;
using engine::Value;

absl::Status Invalid(absl::string_view what, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

// BYTES in raw contents, as Triton sends them: each element a 4-byte little-endian length and that
// many bytes, back to back, nothing left over.
absl::StatusOr<Tensor> DecodeRawStrings(const std::string& what, absl::string_view bytes,
                                        const engine::Shape& shape, absl::string_view field) {
  const int64_t n = shape.NumElements();
  // Every element needs its 4-byte length: checked before anything is allocated for the shape.
  if (static_cast<uint64_t>(n) > bytes.size() / 4) {
    return Invalid(what, absl::StrCat("shape ", shape.ToString(), " needs ", n,
                                      " length-prefixed BYTES elements, ", field, " has ",
                                      bytes.size(), " bytes"));
  }
  Tensor tensor(DataType::kString, shape);
  std::string* out = tensor.mutable_data<std::string>();
  size_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    const protocol::BytesElement e = protocol::ReadBytesElement(bytes, at);
    if (e.error == protocol::BytesElement::Error::kTruncatedLength) {
      return Invalid(
          what, absl::StrCat(field, " ends inside the length of BYTES element ", i, " of ", n));
    }
    if (e.error == protocol::BytesElement::Error::kOverrun) {
      return Invalid(what, absl::StrCat("BYTES element ", i, " has length ", e.length, " but only ",
                                        bytes.size() - at - 4, " bytes follow"));
    }
    out[i].assign(e.value.data(), e.value.size());
    at = e.next;
  }
  if (at != bytes.size()) {
    return Invalid(what, absl::StrCat(field, " has ", bytes.size() - at, " bytes after the ", n,
                                      " BYTES elements of shape ", shape.ToString()));
  }
  return tensor;
}

}  // namespace

absl::StatusOr<Tensor> DecodeRawTensor(const std::string& what, absl::string_view bytes,
                                       DataType dtype, const engine::Shape& shape,
                                       absl::string_view field) {
  if (dtype == DataType::kString) return DecodeRawStrings(what, bytes, shape, field);
  const size_t element_size = engine::DataTypeSize(dtype);
  // ValidateDims bounds the element count by 2^40, so this product cannot overflow.
  const uint64_t expected = static_cast<uint64_t>(shape.NumElements()) * element_size;
  if (bytes.size() != expected) {
    return Invalid(what,
                   absl::StrCat("shape ", shape.ToString(), " of ", engine::DataTypeName(dtype),
                                " needs ", expected, " bytes, ", field, " has ", bytes.size()));
  }
  // A bool is one byte holding 0 or 1; any other byte would be read as a bool that is neither
  // (undefined behaviour in every kernel and encoder that loads it).
  if (dtype == DataType::kBool) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      const auto byte = static_cast<unsigned char>(bytes[i]);
      if (byte > 1) {
        return Invalid(what, absl::StrCat("BOOL element ", i, " is byte ", byte, " in ", field,
                                          "; a BOOL is one byte, 0 (false) or 1 (true)"));
      }
    }
  }
  // A view avoids copying large tensors; kernels may read elements as T, so the bytes must be
  // aligned for T. Protobuf and evbuffers usually, but not always, hand out aligned storage.
  if (reinterpret_cast<uintptr_t>(bytes.data()) % element_size == 0) {
    return Tensor::View(dtype, shape, bytes.data());
  }
  Tensor tensor(dtype, shape);
  if (expected > 0) std::memcpy(tensor.mutable_raw_data(), bytes.data(), expected);
  return tensor;
}

size_t RawTensorSize(const Tensor& tensor) {
  if (tensor.dtype() != DataType::kString) return tensor.ByteSize();
  size_t size = 0;
  for (const std::string& s : tensor.span<std::string>()) size += 4 + s.size();
  return size;
}

absl::Status AppendRawTensor(const std::string& what, const Tensor& tensor, std::string* out) {
  if (tensor.dtype() == DataType::kString) {
    // Length-prefixed, as BYTES inputs arrive.
    for (const std::string& s : tensor.span<std::string>()) {
      if (s.size() > UINT32_MAX) {
        return absl::ResourceExhaustedError(
            absl::StrCat(what, ": a BYTES element of ", s.size(), " bytes exceeds 4 GiB"));
      }
      protocol::AppendBytesElement(s, out);
    }
    return absl::OkStatus();
  }
  const auto* data = static_cast<const char*>(tensor.raw_data());
  if (data != nullptr) out->append(data, tensor.ByteSize());
  return absl::OkStatus();
}

absl::StatusOr<DecodedRequest> BindRequest(InferenceRequest& request, const engine::Model& model,
                                           absl::Span<const int> server_inputs) {
  const auto& specs = model.inputs();
  DecodedRequest decoded;
  decoded.inputs.resize(specs.size());
  absl::InlinedVector<bool, 16> seen(specs.size(), false);  // no allocation for most models
  for (int index : server_inputs) seen[index] = true;
  for (InferenceRequest::Input& input : request.inputs) {
    const std::string what = absl::StrCat("input ", QuoteUntrusted(input.name));
    const int index = model.FindInput(input.name);
    if (index < 0) return Invalid(what, "the model has no such input");
    if (seen[index]) {
      for (int fed : server_inputs) {
        if (fed == index) {
          return Invalid(what, "is a sequence control or state input, which the server feeds");
        }
      }
      return Invalid(what, "given more than once");
    }
    seen[index] = true;
    const engine::TensorSpec& spec = specs[index];
    if (spec.type.kind == engine::ValueKind::kSequence) {
      return Invalid(what, "is a sequence, which KServe v2 cannot carry");
    }
    absl::StatusOr<DataType> dtype = DataTypeFromKserve(input.datatype);
    if (!dtype.ok()) return Invalid(what, dtype.status().message());
    if (spec.type.dtype != DataType::kUndefined && *dtype != spec.type.dtype) {
      return Invalid(what, absl::StrCat("datatype ", input.datatype, " does not match the model's ",
                                        KserveDataType(spec.type.dtype)));
    }
    LS_ASSIGN_OR_RETURN(engine::Shape shape, engine::ValidateDims(input.shape, what));
    absl::StatusOr<Tensor> tensor =
        input.decode ? input.decode(what, *dtype, shape)
                     : DecodeRawTensor(what, input.raw, *dtype, shape, request.raw_field);
    if (!tensor.ok()) return tensor.status();
    decoded.inputs[index] = Value(*std::move(tensor));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!seen[i] && specs[i].type.kind != engine::ValueKind::kOptional) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", specs[i].name, "': missing from the request"));
    }
  }

  if (request.outputs.empty()) {
    for (size_t i = 0; i < model.outputs().size(); ++i) {
      decoded.outputs.push_back(static_cast<int>(i));
    }
  } else {
    absl::InlinedVector<bool, 16> requested(model.outputs().size(), false);
    for (const std::string& name : request.outputs) {
      const std::string what = absl::StrCat("output ", QuoteUntrusted(name));
      const int index = model.FindOutput(name);
      if (index < 0) return Invalid(what, "the model has no such output");
      if (requested[index]) return Invalid(what, "requested more than once");
      requested[index] = true;
      decoded.outputs.push_back(index);
    }
  }
  return decoded;
}

absl::Status ApplySequenceIdHeader(std::optional<absl::string_view> header,
                                   InferenceRequest* request) {
  if (!header.has_value()) return absl::OkStatus();
  const absl::string_view value = *header;
  if (value.empty() || value.size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header ", kSequenceIdHeader, " must hold 1 to 256 bytes, got ", value.size()));
  }
  InferenceRequest::Sequence from_header;
  uint64_t numeric = 0;
  if (absl::SimpleAtoi(value, &numeric) && numeric != 0 &&
      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    from_header.id = numeric;
  } else {
    from_header.string_id = std::string(value);
  }
  InferenceRequest::Sequence& sequence = request->sequence;
  if (!sequence.present()) {
    sequence.id = from_header.id;
    sequence.string_id = std::move(from_header.string_id);
    return absl::OkStatus();
  }
  if (sequence.id != from_header.id || sequence.string_id != from_header.string_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("header ", kSequenceIdHeader, " ", QuoteUntrusted(value),
                     " names another sequence than the request's sequence_id parameter"));
  }
  return absl::OkStatus();
}

}  // namespace loopserve::server
