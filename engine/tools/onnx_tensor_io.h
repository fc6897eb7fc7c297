#pragma once

// Conversion between engine values and the protobuf encodings of the ONNX backend-test layout
// (`input_<k>.pb` / `output_<k>.pb`): TensorProto for tensors, SequenceProto for sequences and
// OptionalProto for optionals. Used by looprun; stateless and thread-safe.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/value.h"
#include "onnx/onnx-data_pb.h"  // includes onnx/onnx_pb.h, which defines ONNX_API

namespace loopserve::tools {

// Maps an ONNX TensorProto.DataType to the engine's element type; Unimplemented for types the
// engine does not store (string, complex, ...), naming `what`.
absl::StatusOr<engine::DataType> DataTypeFromOnnx(int onnx_type, absl::string_view what);
// The ONNX TensorProto.DataType of an engine element type (0 = UNDEFINED for kUndefined).
int DataTypeToOnnx(engine::DataType type);

// Decodes `proto` into an owned tensor. Accepts `raw_data` (little-endian) or the typed field the
// ONNX spec assigns to the type (float_data; int32_data for int8/16, uint8/16, bool, float16 and
// bfloat16 bit patterns; int64_data; double_data; uint64_data for uint32/64). Validates the dims
// and that the byte or element count matches them. InvalidArgument for malformed tensors,
// Unimplemented for string tensors, other unsupported types and external or segmented data. `what`
// names the tensor in messages (e.g. the file).
absl::StatusOr<engine::Tensor> TensorFromProto(const onnx::TensorProto& proto,
                                               absl::string_view what);
// Encodes `tensor` as a TensorProto named `name`, with its contents in `raw_data`.
onnx::TensorProto TensorToProto(const engine::Tensor& tensor, const std::string& name);

// Decodes a SequenceProto of tensors / an OptionalProto (holding nothing, a tensor or a sequence
// of tensors) into a Value.
absl::StatusOr<engine::Value> ValueFromSequenceProto(const onnx::SequenceProto& proto,
                                                     absl::string_view what);
absl::StatusOr<engine::Value> ValueFromOptionalProto(const onnx::OptionalProto& proto,
                                                     absl::string_view what);
// Encodes a sequence value as a SequenceProto, and any value as an OptionalProto (kNone is the
// empty optional, encoded with elem_type UNDEFINED as onnx.numpy_helper does).
absl::StatusOr<onnx::SequenceProto> ValueToSequenceProto(const engine::Value& value,
                                                         const std::string& name);
absl::StatusOr<onnx::OptionalProto> ValueToOptionalProto(const engine::Value& value,
                                                         const std::string& name);

// Reads the .pb file at `path` in the encoding that `declared` (a model input's or output's
// type) calls for: a SequenceProto for kSequence, an OptionalProto for kOptional, a TensorProto
// otherwise. Where the model declares bfloat16 and the file holds uint16 (how the onnx 1.12 test
// data store bfloat16 bit patterns), the tensor is taken as bfloat16. NotFound when the file does
// not exist; InvalidArgument (naming the file) when it does not parse or is malformed. `name`
// (optional) receives the name stored in the file.
absl::StatusOr<engine::Value> ReadValueFile(const std::string& path,
                                            const engine::ValueType& declared,
                                            std::string* name = nullptr);

// Writes `value` to `path` in the encoding `declared` calls for (for kUnknown: a TensorProto for a
// tensor, a SequenceProto for a sequence), named `name`.
absl::Status WriteValueFile(const std::string& path, const std::string& name,
                            const engine::Value& value, const engine::ValueType& declared);

}  // namespace loopserve::tools
