#pragma once

#include <vector>

#include "engine/tensor/tensor.h"

namespace loopserve::engine {

// What a graph value holds at run time: a tensor, a sequence of tensors, or nothing (an empty
// optional, or a slot not yet computed). An optional that holds something is just that something.
// Move-only, like Tensor; swapping two Values swaps buffers, never data.
class Value {
 public:
  enum class Kind : uint8_t { kNone, kTensor, kSequence };

  Value() = default;
  explicit Value(Tensor tensor) : kind_(Kind::kTensor), tensor_(std::move(tensor)) {}

  Kind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  bool is_sequence() const { return kind_ == Kind::kSequence; }
  bool is_none() const { return kind_ == Kind::kNone; }

  const Tensor& tensor() const { return tensor_; }
  // Makes this a tensor value (keeping the tensor's buffer for reuse) and returns it.
  Tensor& mutable_tensor() {
    kind_ = Kind::kTensor;
    return tensor_;
  }

  const std::vector<Tensor>& sequence() const { return sequence_; }
  // Makes this a sequence value (keeping the elements) and returns it.
  std::vector<Tensor>& mutable_sequence() {
    kind_ = Kind::kSequence;
    return sequence_;
  }

  void SetNone() { kind_ = Kind::kNone; }

  // Deep copy of `other` into this value, reusing buffers.
  void CopyFrom(const Value& other);

  friend void swap(Value& a, Value& b) noexcept {
    using std::swap;
    swap(a.kind_, b.kind_);
    swap(a.tensor_, b.tensor_);
    swap(a.sequence_, b.sequence_);
  }

 private:
  Kind kind_ = Kind::kNone;
  Tensor tensor_;
  std::vector<Tensor> sequence_;
};

}  // namespace loopserve::engine
