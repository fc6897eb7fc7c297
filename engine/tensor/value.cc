#include "engine/tensor/value.h"

namespace loopserve::engine {

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
