#pragma once

// Host tensors as the Open Inference Protocol carries them, and their conversion to and from the
// OIP messages (raw or typed contents).

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "proto/grpc_service.pb.h"
#include "protocol/datatype.h"

namespace loopserve::client {

// Size in bytes of one element of an OIP datatype ("FP32", "INT64", "BOOL", ...); 0 for BYTES and
// for names that are not OIP datatypes.
int64_t DataTypeSize(absl::string_view datatype);

// Whether `datatype` names an OIP datatype (BYTES included).
bool IsDataType(absl::string_view datatype);

// Number of elements of `shape` (1 for a scalar). InvalidArgument for a negative dim or overflow.
absl::StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape);

// A named tensor in host memory: OIP datatype, shape and the flattened, row-major, little-endian
// bytes (BOOL: one byte per element, 0 or 1; BYTES: each element as a 4-byte little-endian length
// and that many bytes, the raw layout Triton uses). A plain value type; not synchronised.
struct Tensor {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::string bytes;

  // OK when the datatype is known and `bytes` holds exactly the shape's elements (shape × element
  // size bytes, or that many length-prefixed BYTES elements with nothing left over).
  absl::Status Validate() const;
};

// A BYTES tensor of `elements` (row-major).
Tensor MakeBytesTensor(std::string name, std::vector<int64_t> shape,
                       const std::vector<std::string>& elements);

// The elements of a BYTES tensor. InvalidArgument when it is not BYTES or is malformed.
absl::StatusOr<std::vector<std::string>> BytesElements(const Tensor& t);

// Builds a tensor from typed values. The caller makes shape and value count agree (Validate()
// checks it; the server rejects a mismatch with InvalidArgument).
template <typename T>
Tensor MakeTensor(std::string name, std::vector<int64_t> shape, const std::vector<T>& values) {
  Tensor t;
  t.name = std::move(name);
  t.datatype = std::string(protocol::DatatypeName(protocol::DatatypeOf<T>()));
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  for (size_t i = 0; i < values.size(); ++i) {
    T v = values[i];  // std::vector<bool> has no data()
    std::memcpy(&t.bytes[i * sizeof(T)], &v, sizeof(T));
  }
  return t;
}

// Reads the values of `t`. InvalidArgument when the datatype is not T's or the byte count does
// not match the shape.
template <typename T>
absl::StatusOr<std::vector<T>> TensorValues(const Tensor& t) {
  if (protocol::ParseDatatype(t.datatype) != protocol::DatatypeOf<T>()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' has datatype ", t.datatype, ", not ",
                     protocol::DatatypeName(protocol::DatatypeOf<T>())));
  }
  absl::Status valid = t.Validate();
  if (!valid.ok()) return valid;
  std::vector<T> values(t.bytes.size() / sizeof(T));
  for (size_t i = 0; i < values.size(); ++i) {
    T v;
    std::memcpy(&v, &t.bytes[i * sizeof(T)], sizeof(T));
    values[i] = v;
  }
  return values;
}

// How Infer puts input tensors on the wire.
enum class ContentsMode {
  kRaw,    // raw_input_contents (what loopserve and Triton prefer)
  kTyped,  // InferTensorContents fields (FP16/BF16 cannot go this way; BYTES: bytes_contents)
};

// Appends `tensor` to `request` as an input. With kRaw, the request must not hold typed contents
// and gets one raw_input_contents entry per input. InvalidArgument when the tensor is not
// Validate()-clean or its datatype has no typed field.
absl::Status AddInput(const Tensor& tensor, ContentsMode mode,
                      inference::ModelInferRequest* request);

// The outputs of `response` as tensors, from raw_output_contents or the typed contents.
// InvalidArgument when the response is inconsistent (counts, byte sizes).
absl::StatusOr<std::vector<Tensor>> DecodeOutputs(const inference::ModelInferResponse& response);

// One line per tensor: `name DATATYPE [d0,d1] = [v0, v1, ...]`, at most `max_elements` values
// (then `... (N more)`). Floats with enough digits to round-trip.
std::string FormatTensor(const Tensor& tensor, int64_t max_elements = 32);

// The element at flat index `i` formatted as text ("1.5", "-3", "true", a BYTES element quoted
// with C escapes).
std::string FormatElement(const Tensor& tensor, int64_t i);

}  // namespace loopserve::client
