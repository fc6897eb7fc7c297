#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor/tensor.h"

namespace loopserve::engine {

// What a graph value is declared to hold.
enum class ValueKind : uint8_t { kTensor, kSequence, kOptional, kUnknown };

// Static type of a value, as far as the model declares it. Every part may be unknown.
struct ValueType {
  ValueKind kind = ValueKind::kTensor;
  DataType dtype = DataType::kUndefined;  // element type (of the tensor / sequence elements)
  // Declared dims; -1 for an unknown dim. std::nullopt when the rank itself is unknown.
  std::optional<std::vector<int64_t>> dims;
  // For kOptional: what the optional holds (kTensor or kSequence).
  ValueKind optional_of = ValueKind::kTensor;

  static ValueType Unknown() {
    ValueType t;
    t.kind = ValueKind::kUnknown;
    return t;
  }
  std::string ToString() const;
};

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
