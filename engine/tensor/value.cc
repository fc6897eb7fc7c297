#include "engine/tensor/value.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loopserve::engine {

std::string ValueType::ToString() const {
  std::string dims_text = "?";
  if (dims.has_value()) dims_text = DimsToString(*dims);
  switch (kind) {
    case ValueKind::kTensor:
      return absl::StrCat(DataTypeName(dtype), dims_text);
    case ValueKind::kSequence:
      return absl::StrCat("seq(", DataTypeName(dtype), ")");
    case ValueKind::kOptional:
      return absl::StrCat("optional(", DataTypeName(dtype), ")");
    case ValueKind::kUnknown:
      return "unknown";
  }
  return "unknown";
}

void Value::CopyFrom(const Value& other) {
  if (this == &other) return;
  kind_ = other.kind_;
  switch (other.kind_) {
    case Kind::kTensor:
      tensor_.CopyFrom(other.tensor_);
      break;
    case Kind::kSequence:
      sequence_.resize(other.sequence_.size());
      for (size_t i = 0; i < other.sequence_.size(); ++i) sequence_[i].CopyFrom(other.sequence_[i]);
      break;
    case Kind::kNone:
      break;
  }
}

}  // namespace loopserve::engine
