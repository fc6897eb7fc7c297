#include "engine/kernels/native/post_ops.h"

#include "absl/strings/str_cat.h"

namespace loopserve::engine::native {

VecUnary VecUnaryOf(EltwiseFn fn) {
  switch (fn) {
    case EltwiseFn::kRelu:
      return VecUnary::kRelu;
    case EltwiseFn::kTanh:
      return VecUnary::kTanh;
    case EltwiseFn::kSigmoid:
      return VecUnary::kSigmoid;
    case EltwiseFn::kExp:
      return VecUnary::kExp;
    case EltwiseFn::kLog:
      return VecUnary::kLog;
    case EltwiseFn::kSqrt:
      return VecUnary::kSqrt;
    case EltwiseFn::kAbs:
      return VecUnary::kAbs;
    case EltwiseFn::kNeg:
      return VecUnary::kNeg;
    case EltwiseFn::kErf:
      return VecUnary::kErf;
    case EltwiseFn::kSoftplus:
      return VecUnary::kSoftplus;
    case EltwiseFn::kGeluErf:
      return VecUnary::kGeluErf;
    case EltwiseFn::kGeluTanh:
      return VecUnary::kGeluTanh;
    case EltwiseFn::kReciprocal:
      return VecUnary::kReciprocal;
    case EltwiseFn::kLinear:
      return VecUnary::kLinear;
    case EltwiseFn::kPow:
      return VecUnary::kPow;
    case EltwiseFn::kLeakyRelu:
      return VecUnary::kLeakyRelu;
    case EltwiseFn::kElu:
      return VecUnary::kElu;
    case EltwiseFn::kHardSigmoid:
      return VecUnary::kHardSigmoid;
    case EltwiseFn::kHardSwish:
      return VecUnary::kHardSwish;
    case EltwiseFn::kSoftsign:
      return VecUnary::kSoftsign;
    case EltwiseFn::kClip:
      return VecUnary::kClip;
  }
  return VecUnary::kIdentity;
}

VecBinary VecBinaryOf(ArithOp op) {
  switch (op) {
    case ArithOp::kAdd:
      return VecBinary::kAdd;
    case ArithOp::kSub:
      return VecBinary::kSub;
    case ArithOp::kMul:
      return VecBinary::kMul;
    case ArithOp::kDiv:
      return VecBinary::kDiv;
    case ArithOp::kMax:
      return VecBinary::kMax;
    case ArithOp::kMin:
      return VecBinary::kMin;
    case ArithOp::kPow:
      return VecBinary::kPow;
  }
  return VecBinary::kAdd;
}

absl::StatusOr<ElementwiseChain> ChainOfPostOps(absl::Span<const PostOp> post_ops, int num_inputs,
                                                std::vector<int>* epilogue_inputs) {
  std::vector<ChainStep> steps;
  int num_operands = epilogue_inputs == nullptr ? num_inputs : 1;
  for (const PostOp& p : post_ops) {
    if (p.kind == PostOp::Kind::kUnary) {
      steps.push_back(ChainStep::Unary(VecUnaryOf(p.fn), p.alpha, p.beta));
      continue;
    }
    if (p.input < 0 || p.input >= num_inputs) {
      return absl::InvalidArgumentError(
          absl::StrCat("a post-op reads input ", p.input, " of a node with ", num_inputs));
    }
    int operand = p.input;
    if (epilogue_inputs != nullptr) {
      operand = -1;
      for (size_t k = 0; k < epilogue_inputs->size(); ++k) {
        if ((*epilogue_inputs)[k] == p.input) operand = static_cast<int>(k) + 1;
      }
      if (operand < 0) {
        epilogue_inputs->push_back(p.input);
        operand = num_operands++;
      }
    }
    steps.push_back(ChainStep::Binary(VecBinaryOf(p.op), operand, p.input_first));
  }
  if (num_operands > ElementwiseChain::kMaxOperands) {
    return absl::InvalidArgumentError(absl::StrCat("a fused chain of ", num_operands,
                                                   " operands (at most ",
                                                   ElementwiseChain::kMaxOperands, ")"));
  }
  return ElementwiseChain(num_operands, std::move(steps));
}

}  // namespace loopserve::engine::native
