#include "client/tensor.h"

#include <limits>
#include <type_traits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "protocol/bytes.h"
#include "protocol/datatype.h"
#include "protocol/typed_contents.h"

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

// Splits length-prefixed BYTES contents; `expected` elements (or any number when negative).
absl::StatusOr<std::vector<std::string>> SplitBytes(const std::string& name,
                                                    const std::string& bytes, int64_t expected) {
  std::vector<std::string> elements;
  size_t at = 0;
  while (at < bytes.size()) {
    const protocol::BytesElement e = protocol::ReadBytesElement(bytes, at);
    if (e.error == protocol::BytesElement::Error::kTruncatedLength) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': BYTES contents end inside a length"));
    }
    if (e.error == protocol::BytesElement::Error::kOverrun) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': BYTES element ",
                                                     elements.size(), " overruns the contents"));
    }
    if (expected >= 0 && static_cast<int64_t>(elements.size()) >= expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': more than ", expected, " BYTES elements"));
    }
    elements.emplace_back(e.value);
    at = e.next;
  }
  if (expected >= 0 && static_cast<int64_t>(elements.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", elements.size(),
                                                   " BYTES elements, the shape needs ", expected));
  }
  return elements;
}

// The raw little-endian bytes `b` (n elements of `d`) -> the typed contents field of `d`.
absl::Status ToTyped(const Tensor& t, int64_t n, inference::InferTensorContents* c) {
  const protocol::Datatype d = protocol::ParseDatatype(t.datatype);
  const protocol::ContentsField field = protocol::ContentsFieldOf(d);
  if (field == protocol::ContentsField::kBytes) {
    absl::StatusOr<std::vector<std::string>> elements = SplitBytes(t.name, t.bytes, -1);
    if (!elements.ok()) return elements.status();
    for (std::string& e : *elements) c->add_bytes_contents(std::move(e));
    return absl::OkStatus();
  }
  const bool typed = protocol::VisitNumeric(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    protocol::VisitMutableContents(c, field, [&](auto* values) {
      values->Reserve(static_cast<int>(n));
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<T, bool>) {
          values->Add(t.bytes[i] != 0);
        } else {
          values->Add(Load<T>(t.bytes, i));
        }
      }
    });
  });
  if (!typed || field == protocol::ContentsField::kNone) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': datatype ", t.datatype,
                                                   " has no typed contents field"));
  }
  return absl::OkStatus();
}

// A typed contents field of datatype `d` -> raw little-endian bytes.
absl::StatusOr<std::string> FromTyped(const std::string& name, const std::string& datatype,
                                      const inference::InferTensorContents& c) {
  const protocol::Datatype d = protocol::ParseDatatype(datatype);
  const protocol::ContentsField field = protocol::ContentsFieldOf(d);
  std::string b;
  if (field == protocol::ContentsField::kBytes) {
    for (const std::string& e : c.bytes_contents()) protocol::AppendBytesElement(e, &b);
    return b;
  }
  const bool typed = protocol::VisitNumeric(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    protocol::VisitContents(c, field, [&](const auto& values) {
      b.reserve(values.size() * sizeof(T));
      for (const auto& v : values) Store<T>(static_cast<T>(v), &b);
    });
  });
  if (!typed || field == protocol::ContentsField::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat("output '", name, "': datatype ", datatype, " has no typed contents field"));
  }
  return b;
}

}  // namespace

int64_t DataTypeSize(absl::string_view d) {
  return protocol::ElementSize(protocol::ParseDatatype(d));
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

bool IsDataType(absl::string_view d) {
  return protocol::ParseDatatype(d) != protocol::Datatype::kInvalid;
}

Tensor MakeBytesTensor(std::string name, std::vector<int64_t> shape,
                       const std::vector<std::string>& elements) {
  Tensor t;
  t.name = std::move(name);
  t.datatype = "BYTES";
  t.shape = std::move(shape);
  for (const std::string& e : elements) protocol::AppendBytesElement(e, &t.bytes);
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
  const protocol::Datatype d = protocol::ParseDatatype(t.datatype);
  const std::string& b = t.bytes;
  if (d == protocol::Datatype::kBytes) {
    absl::StatusOr<std::vector<std::string>> elements = SplitBytes(t.name, b, -1);
    if (!elements.ok() || i < 0 || i >= static_cast<int64_t>(elements->size())) return "?";
    return absl::StrCat("\"", absl::Utf8SafeCEscape((*elements)[i]), "\"");
  }
  if (d == protocol::Datatype::kFp16 || d == protocol::Datatype::kBf16) {
    return absl::StrFormat("0x%04x", Load<uint16_t>(b, i));
  }
  std::string out = "?";
  protocol::VisitNumeric(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      out = b[i] != 0 ? "true" : "false";
    } else if constexpr (std::is_same_v<T, float>) {
      out = absl::StrFormat("%.9g", Load<float>(b, i));
    } else if constexpr (std::is_same_v<T, double>) {
      out = absl::StrFormat("%.17g", Load<double>(b, i));
    } else {
      out = absl::StrCat(Load<T>(b, i));
    }
  });
  return out;
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
