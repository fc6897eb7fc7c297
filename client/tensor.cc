#include "client/tensor.h"

#include <limits>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace loopserve::client {
namespace {

template <typename T>
T Load(const std::string& bytes, int64_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void Store(T v, std::string* bytes) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  bytes->append(buf, sizeof(T));
}

// Copies the typed field's values into `bytes` narrowed/widened to the element type Elem.
template <typename Elem, typename Field>
void AppendAs(const Field& field, std::string* bytes) {
  bytes->reserve(bytes->size() + field.size() * sizeof(Elem));
  for (const auto& v : field) Store<Elem>(static_cast<Elem>(v), bytes);
}

template <typename Elem, typename Field>
void CopyInto(const std::string& bytes, int64_t n, Field* field) {
  field->Reserve(static_cast<int>(n));
  for (int64_t i = 0; i < n; ++i) field->Add(Load<Elem>(bytes, i));
}

absl::Status ToTyped(const Tensor& t, int64_t n, inference::InferTensorContents* c) {
  const std::string& d = t.datatype;
  const std::string& b = t.bytes;
  if (d == "BOOL") {
    for (int64_t i = 0; i < n; ++i) c->add_bool_contents(b[i] != 0);
  } else if (d == "INT8") {
    CopyInto<int8_t>(b, n, c->mutable_int_contents());
  } else if (d == "INT16") {
    CopyInto<int16_t>(b, n, c->mutable_int_contents());
  } else if (d == "INT32") {
    CopyInto<int32_t>(b, n, c->mutable_int_contents());
  } else if (d == "INT64") {
    CopyInto<int64_t>(b, n, c->mutable_int64_contents());
  } else if (d == "UINT8") {
    CopyInto<uint8_t>(b, n, c->mutable_uint_contents());
  } else if (d == "UINT16") {
    CopyInto<uint16_t>(b, n, c->mutable_uint_contents());
  } else if (d == "UINT32") {
    CopyInto<uint32_t>(b, n, c->mutable_uint_contents());
  } else if (d == "UINT64") {
    CopyInto<uint64_t>(b, n, c->mutable_uint64_contents());
  } else if (d == "FP32") {
    CopyInto<float>(b, n, c->mutable_fp32_contents());
  } else if (d == "FP64") {
    CopyInto<double>(b, n, c->mutable_fp64_contents());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "': datatype ", d, " has no typed contents field"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FromTyped(const std::string& name, const std::string& d,
                                      const inference::InferTensorContents& c) {
  std::string b;
  if (d == "BOOL") {
    for (bool v : c.bool_contents()) b.push_back(v ? 1 : 0);
  } else if (d == "INT8") {
    AppendAs<int8_t>(c.int_contents(), &b);
  } else if (d == "INT16") {
    AppendAs<int16_t>(c.int_contents(), &b);
  } else if (d == "INT32") {
    AppendAs<int32_t>(c.int_contents(), &b);
  } else if (d == "INT64") {
    AppendAs<int64_t>(c.int64_contents(), &b);
  } else if (d == "UINT8") {
    AppendAs<uint8_t>(c.uint_contents(), &b);
  } else if (d == "UINT16") {
    AppendAs<uint16_t>(c.uint_contents(), &b);
  } else if (d == "UINT32") {
    AppendAs<uint32_t>(c.uint_contents(), &b);
  } else if (d == "UINT64") {
    AppendAs<uint64_t>(c.uint64_contents(), &b);
  } else if (d == "FP32") {
    AppendAs<float>(c.fp32_contents(), &b);
  } else if (d == "FP64") {
    AppendAs<double>(c.fp64_contents(), &b);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("output '", name, "': datatype ", d, " has no typed contents field"));
  }
  return b;
}

}  // namespace

int64_t DataTypeSize(absl::string_view d) {
  if (d == "BOOL" || d == "INT8" || d == "UINT8") return 1;
  if (d == "INT16" || d == "UINT16" || d == "FP16" || d == "BF16") return 2;
  if (d == "INT32" || d == "UINT32" || d == "FP32") return 4;
  if (d == "INT64" || d == "UINT64" || d == "FP64") return 8;
  return 0;
}

absl::StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dim in shape [", absl::StrJoin(shape, ","), "]"));
    }
    if (dim != 0 && n > std::numeric_limits<int64_t>::max() / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ","), "] overflows"));
    }
    n *= dim;
  }
  return n;
}

absl::Status Tensor::Validate() const {
  const int64_t size = DataTypeSize(datatype);
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': unsupported datatype '", datatype, "'"));
  }
  absl::StatusOr<int64_t> n = ElementCount(shape);
  if (!n.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", n.status().message()));
  }
  if (static_cast<int64_t>(bytes.size()) != *n * size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': shape [", absl::StrJoin(shape, ","), "] of ", datatype,
                     " needs ", *n * size, " bytes, got ", bytes.size()));
  }
  return absl::OkStatus();
}

absl::Status AddInput(const Tensor& tensor, ContentsMode mode,
                      inference::ModelInferRequest* request) {
  absl::Status valid = tensor.Validate();
  if (!valid.ok()) return valid;
  if (mode == ContentsMode::kRaw && request->raw_input_contents_size() != request->inputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name, "': cannot mix raw and typed contents"));
  }
  auto* input = request->add_inputs();
  input->set_name(tensor.name);
  input->set_datatype(tensor.datatype);
  for (int64_t dim : tensor.shape) input->add_shape(dim);
  if (mode == ContentsMode::kRaw) {
    request->add_raw_input_contents(tensor.bytes);
    return absl::OkStatus();
  }
  return ToTyped(tensor, static_cast<int64_t>(tensor.bytes.size()) / DataTypeSize(tensor.datatype),
                 input->mutable_contents());
}

absl::StatusOr<std::vector<Tensor>> DecodeOutputs(const inference::ModelInferResponse& response) {
  const bool raw = response.raw_output_contents_size() > 0;
  if (raw && response.raw_output_contents_size() != response.outputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("response has ", response.outputs_size(), " outputs but ",
                     response.raw_output_contents_size(), " raw_output_contents entries"));
  }
  std::vector<Tensor> outputs;
  outputs.reserve(response.outputs_size());
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& out = response.outputs(i);
    Tensor t;
    t.name = out.name();
    t.datatype = out.datatype();
    t.shape.assign(out.shape().begin(), out.shape().end());
    if (raw) {
      t.bytes = response.raw_output_contents(i);
    } else {
      absl::StatusOr<std::string> bytes = FromTyped(t.name, t.datatype, out.contents());
      if (!bytes.ok()) return bytes.status();
      t.bytes = *std::move(bytes);
    }
    absl::Status valid = t.Validate();
    if (!valid.ok()) return valid;
    outputs.push_back(std::move(t));
  }
  return outputs;
}

std::string FormatElement(const Tensor& t, int64_t i) {
  const std::string& d = t.datatype;
  const std::string& b = t.bytes;
  if (d == "BOOL") return b[i] != 0 ? "true" : "false";
  if (d == "INT8") return absl::StrCat(Load<int8_t>(b, i));
  if (d == "INT16") return absl::StrCat(Load<int16_t>(b, i));
  if (d == "INT32") return absl::StrCat(Load<int32_t>(b, i));
  if (d == "INT64") return absl::StrCat(Load<int64_t>(b, i));
  if (d == "UINT8") return absl::StrCat(Load<uint8_t>(b, i));
  if (d == "UINT16") return absl::StrCat(Load<uint16_t>(b, i));
  if (d == "UINT32") return absl::StrCat(Load<uint32_t>(b, i));
  if (d == "UINT64") return absl::StrCat(Load<uint64_t>(b, i));
  if (d == "FP32") return absl::StrFormat("%.9g", Load<float>(b, i));
  if (d == "FP64") return absl::StrFormat("%.17g", Load<double>(b, i));
  if (d == "FP16" || d == "BF16") return absl::StrFormat("0x%04x", Load<uint16_t>(b, i));
  return "?";
}

std::string FormatTensor(const Tensor& t, int64_t max_elements) {
  std::string out =
      absl::StrCat(t.name, " ", t.datatype, " [", absl::StrJoin(t.shape, ","), "] = ");
  const int64_t size = DataTypeSize(t.datatype);
  if (size == 0) return absl::StrCat(out, "<", t.bytes.size(), " bytes>");
  const int64_t n = static_cast<int64_t>(t.bytes.size()) / size;
  out += "[";
  for (int64_t i = 0; i < n && i < max_elements; ++i) {
    if (i > 0) out += ", ";
    out += FormatElement(t, i);
  }
  if (n > max_elements) absl::StrAppend(&out, ", ... (", n - max_elements, " more)");
  out += "]";
  return out;
}

}  // namespace loopserve::client
