#include "client/onnx_tensor.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace loopserve::client {
namespace {

template <typename Elem, typename Field>
void AppendAs(const Field& field, std::string* bytes) {
  for (const auto& v : field) {
    Elem e = static_cast<Elem>(v);
    bytes->append(reinterpret_cast<const char*>(&e), sizeof(Elem));
  }
}

absl::StatusOr<std::string> TypedBytes(const onnx::TensorProto& p) {
  std::string b;
  switch (p.data_type()) {
    case onnx::TensorProto::FLOAT:
      AppendAs<float>(p.float_data(), &b);
      break;
    case onnx::TensorProto::DOUBLE:
      AppendAs<double>(p.double_data(), &b);
      break;
    case onnx::TensorProto::INT64:
      AppendAs<int64_t>(p.int64_data(), &b);
      break;
    case onnx::TensorProto::UINT32:
      AppendAs<uint32_t>(p.uint64_data(), &b);
      break;
    case onnx::TensorProto::UINT64:
      AppendAs<uint64_t>(p.uint64_data(), &b);
      break;
    case onnx::TensorProto::INT32:
      AppendAs<int32_t>(p.int32_data(), &b);
      break;
    case onnx::TensorProto::INT16:
      AppendAs<int16_t>(p.int32_data(), &b);
      break;
    case onnx::TensorProto::INT8:
      AppendAs<int8_t>(p.int32_data(), &b);
      break;
    case onnx::TensorProto::UINT16:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:  // int32_data holds the 16-bit patterns
      AppendAs<uint16_t>(p.int32_data(), &b);
      break;
    case onnx::TensorProto::UINT8:
      AppendAs<uint8_t>(p.int32_data(), &b);
      break;
    case onnx::TensorProto::BOOL:
      for (int32_t v : p.int32_data()) b.push_back(v != 0 ? 1 : 0);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", p.name(), "': unsupported ONNX data_type ", p.data_type()));
  }
  return b;
}

}  // namespace

absl::StatusOr<std::string> OipDataTypeFromOnnx(int t) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
      return std::string("FP32");
    case onnx::TensorProto::DOUBLE:
      return std::string("FP64");
    case onnx::TensorProto::FLOAT16:
      return std::string("FP16");
    case onnx::TensorProto::BFLOAT16:
      return std::string("BF16");
    case onnx::TensorProto::INT8:
      return std::string("INT8");
    case onnx::TensorProto::INT16:
      return std::string("INT16");
    case onnx::TensorProto::INT32:
      return std::string("INT32");
    case onnx::TensorProto::INT64:
      return std::string("INT64");
    case onnx::TensorProto::UINT8:
      return std::string("UINT8");
    case onnx::TensorProto::UINT16:
      return std::string("UINT16");
    case onnx::TensorProto::UINT32:
      return std::string("UINT32");
    case onnx::TensorProto::UINT64:
      return std::string("UINT64");
    case onnx::TensorProto::BOOL:
      return std::string("BOOL");
    case onnx::TensorProto::STRING:
      return std::string("BYTES");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("ONNX data_type ", t, " has no Open Inference Protocol datatype"));
  }
}

absl::StatusOr<Tensor> TensorFromOnnx(const onnx::TensorProto& proto) {
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", proto.name(), "': external data is not supported"));
  }
  absl::StatusOr<std::string> datatype = OipDataTypeFromOnnx(proto.data_type());
  if (!datatype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", proto.name(), "': ", datatype.status().message()));
  }
  Tensor t;
  t.name = proto.name();
  t.datatype = *datatype;
  t.shape.assign(proto.dims().begin(), proto.dims().end());
  if (proto.data_type() == onnx::TensorProto::STRING) {
    std::vector<std::string> elements(proto.string_data().begin(), proto.string_data().end());
    t.bytes = MakeBytesTensor("", {}, elements).bytes;
  } else if (proto.has_raw_data()) {
    t.bytes = proto.raw_data();
  } else {
    absl::StatusOr<std::string> bytes = TypedBytes(proto);
    if (!bytes.ok()) return bytes.status();
    t.bytes = *std::move(bytes);
  }
  absl::Status valid = t.Validate();
  if (!valid.ok()) return valid;
  return t;
}

absl::StatusOr<Tensor> ReadOnnxTensorFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream contents;
  contents << in.rdbuf();
  onnx::TensorProto proto;
  if (!proto.ParseFromString(contents.str())) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not an ONNX TensorProto"));
  }
  absl::StatusOr<Tensor> tensor = TensorFromOnnx(proto);
  if (!tensor.ok()) {
    return absl::Status(tensor.status().code(),
                        absl::StrCat(path, ": ", tensor.status().message()));
  }
  return tensor;
}

absl::StatusOr<std::vector<Tensor>> ReadOnnxTensorDir(const std::string& dir,
                                                      absl::string_view prefix) {
  std::vector<Tensor> tensors;
  for (int k = 0;; ++k) {
    const std::string path = absl::StrCat(dir, "/", prefix, "_", k, ".pb");
    if (!std::ifstream(path)) break;
    absl::StatusOr<Tensor> tensor = ReadOnnxTensorFile(path);
    if (!tensor.ok()) return tensor.status();
    tensors.push_back(*std::move(tensor));
  }
  if (tensors.empty()) {
    return absl::NotFoundError(absl::StrCat("no ", prefix, "_0.pb in '", dir, "'"));
  }
  return tensors;
}

}  // namespace loopserve::client
