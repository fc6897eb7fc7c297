#include "client/tensor.h"

#include <limits>

#include "absl/strings/escaping.h"
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

// Splits length-prefixed BYTES contents; `expected` elements (or any number when negative).
absl::StatusOr<std::vector<std::string>> SplitBytes(const std::string& name,
                                                    const std::string& bytes, int64_t expected) {
  std::vector<std::string> elements;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': BYTES contents end inside a length"));
    }
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + at);
    const uint32_t length = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                            (static_cast<uint32_t>(p[2]) << 16) |
                            (static_cast<uint32_t>(p[3]) << 24);
    at += 4;
    if (length > bytes.size() - at) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': BYTES element ",
                                                     elements.size(), " overruns the contents"));
    }
    if (expected >= 0 && static_cast<int64_t>(elements.size()) >= expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': more than ", expected, " BYTES elements"));
    }
    elements.emplace_back(bytes.data() + at, length);
    at += length;
  }
  if (expected >= 0 && static_cast<int64_t>(elements.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", elements.size(),
                                                   " BYTES elements, the shape needs ", expected));
  }
  return elements;
}

void AppendLengthPrefixed(absl::string_view element, std::string* bytes) {
  const auto n = static_cast<uint32_t>(element.size());
  const char prefix[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                          static_cast<char>((n >> 16) & 0xff), static_cast<char>(n >> 24)};
  bytes->append(prefix, 4);
  bytes->append(element.data(), element.size());
}

absl::Status ToTyped(const Tensor& t, int64_t n, inference::InferTensorContents* c) {
  const std::string& d = t.datatype;
  const std::string& b = t.bytes;
  if (d == "BYTES") {
    absl::StatusOr<std::vector<std::string>> elements = SplitBytes(t.name, b, -1);
    if (!elements.ok()) return elements.status();
    for (std::string& e : *elements) c->add_bytes_contents(std::move(e));
  } else if (d == "BOOL") {
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
  if (d == "BYTES") {
    for (const std::string& e : c.bytes_contents()) AppendLengthPrefixed(e, &b);
  } else if (d == "BOOL") {
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

bool IsDataType(absl::string_view d) { return DataTypeSize(d) > 0 || d == "BYTES"; }

Tensor MakeBytesTensor(std::string name, std::vector<int64_t> shape,
                       const std::vector<std::string>& elements) {
  Tensor t;
  t.name = std::move(name);
  t.datatype = "BYTES";
  t.shape = std::move(shape);
  for (const std::string& e : elements) AppendLengthPrefixed(e, &t.bytes);
  return t;
}

absl::StatusOr<std::vector<std::string>> BytesElements(const Tensor& t) {
  if (t.datatype != "BYTES") {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' has datatype ", t.datatype, ", not BYTES"));
  }
  absl::StatusOr<int64_t> n = ElementCount(t.shape);
  if (!n.ok()) return n.status();
  return SplitBytes(t.name, t.bytes, *n);
}

absl::Status Tensor::Validate() const {
  const int64_t size = DataTypeSize(datatype);
  if (!IsDataType(datatype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': unsupported datatype '", datatype, "'"));
  }
  absl::StatusOr<int64_t> n = ElementCount(shape);
  if (!n.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", n.status().message()));
  }
  if (size == 0) return BytesElements(*this).status();
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
  const int64_t size = DataTypeSize(tensor.datatype);
  return ToTyped(tensor, size == 0 ? 0 : static_cast<int64_t>(tensor.bytes.size()) / size,
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
  if (d == "BYTES") {
    absl::StatusOr<std::vector<std::string>> elements = SplitBytes(t.name, b, -1);
    if (!elements.ok() || i < 0 || i >= static_cast<int64_t>(elements->size())) return "?";
    return absl::StrCat("\"", absl::Utf8SafeCEscape((*elements)[i]), "\"");
  }
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
  std::vector<std::string> elements;
  int64_t n = 0;
  if (t.datatype == "BYTES") {
    absl::StatusOr<std::vector<std::string>> split = SplitBytes(t.name, t.bytes, -1);
    if (!split.ok()) return absl::StrCat(out, "<", t.bytes.size(), " malformed BYTES bytes>");
    elements = *std::move(split);
    n = static_cast<int64_t>(elements.size());
  } else if (size == 0) {
    return absl::StrCat(out, "<", t.bytes.size(), " bytes>");
  } else {
    n = static_cast<int64_t>(t.bytes.size()) / size;
  }
  out += "[";
  for (int64_t i = 0; i < n && i < max_elements; ++i) {
    if (i > 0) out += ", ";
    out += t.datatype == "BYTES" ? absl::StrCat("\"", absl::Utf8SafeCEscape(elements[i]), "\"")
                                 : FormatElement(t, i);
  }
  if (n > max_elements) absl::StrAppend(&out, ", ... (", n - max_elements, " more)");
  out += "]";
  return out;
}

}  // namespace loopserve::client
