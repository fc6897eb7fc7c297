#pragma once

// A chain of float32 elementwise ops evaluated in one pass over the output, with numpy
// broadcasting of every operand: value = operand 0; then each step applies a unary function to
// the value, or a binary op between the value and another operand (either side). What the
// compiler makes of Add -> Mul -> Tanh chains, MatMul epilogues and decomposed activations, and
// what single elementwise ops run on below the oneDNN threshold: the output is walked row by row
// (rows of the collapsed broadcast layout, reference/broadcast.h), each row computed by
// vector_math (AVX-512 / AVX2 / scalar) in place, so no intermediate tensor is written.
//
// ElementwiseChain is a value type; Prepare is pure; Run touches only its arguments: thread-safe.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kernels/native/vector_math.h"
#include "engine/kernels/reference/broadcast.h"
#include "engine/tensor/shape.h"

namespace loopserve::engine::native {

struct ChainStep {
  enum class Kind : uint8_t { kUnary, kBinary };
  Kind kind = Kind::kUnary;
  VecUnary unary = VecUnary::kIdentity;
  VecBinary binary = VecBinary::kAdd;
  int operand = -1;            // kBinary: the other operand's index
  bool operand_first = false;  // kBinary: operand op value (else value op operand)
  float alpha = 0.0f;          // kUnary parameters
  float beta = 0.0f;

  static ChainStep Unary(VecUnary op, float alpha = 0.0f, float beta = 0.0f) {
    ChainStep s;
    s.kind = Kind::kUnary;
    s.unary = op;
    s.alpha = alpha;
    s.beta = beta;
    return s;
  }
  static ChainStep Binary(VecBinary op, int operand, bool operand_first = false) {
    ChainStep s;
    s.kind = Kind::kBinary;
    s.binary = op;
    s.operand = operand;
    s.operand_first = operand_first;
    return s;
  }
};

class ElementwiseChain {
 public:
  static constexpr int kMaxOperands = reference::kMaxBroadcastInputs;

  ElementwiseChain() = default;
  ElementwiseChain(int num_operands, std::vector<ChainStep> steps);

  int num_operands() const { return num_operands_; }
  const std::vector<ChainStep>& steps() const { return steps_; }

  // The iteration plan for one set of operand shapes: the broadcast output shape and its rows.
  // InvalidArgument when the shapes do not broadcast together.
  struct Prepared {
    Shape output;
    reference::BroadcastLayout layout;
  };
  absl::StatusOr<Prepared> Prepare(absl::Span<const Shape* const> shapes) const;

  // out[...] = chain(operands) for `prepared` made from the operands' shapes. `out` has
  // prepared.output's element count and may alias operand 0 when that has the output's shape
  // (every element reads only its own position of operand 0).
  void Run(const Prepared& prepared, absl::Span<const float* const> operands, float* out) const;

 private:
  int num_operands_ = 0;
  std::vector<ChainStep> steps_;
  // The steps in the vector tables' form (vector_math_isa.h), for register-fused rows.
  std::vector<uint8_t> packed_;  // sizeof(vecmath::ChainOp) bytes per step
};

}  // namespace loopserve::engine::native
