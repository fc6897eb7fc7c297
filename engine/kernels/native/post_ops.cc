#include "engine/kernels/native/post_ops.h"

#include "absl/strings/str_cat.h"

namespace loopserve::engine::native {

absl::StatusOr<ElementwiseChain> ChainOfPostOps(absl::Span<const PostOp> post_ops, int num_inputs,
                                                std::vector<int>* epilogue_inputs) {
  std::vector<ChainStep> steps;
  int num_operands = epilogue_inputs == nullptr ? num_inputs : 1;
  for (const PostOp& p : post_ops) {
    if (p.kind == PostOp::Kind::kUnary) {
      steps.push_back(ChainStep::Unary(p.fn, p.alpha, p.beta));
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
    steps.push_back(ChainStep::Binary(p.op, operand, p.input_first));
  }
  if (num_operands > ElementwiseChain::kMaxOperands) {
    return absl::InvalidArgumentError(absl::StrCat("a fused chain of ", num_operands,
                                                   " operands (at most ",
                                                   ElementwiseChain::kMaxOperands, ")"));
  }
  return ElementwiseChain(num_operands, std::move(steps));
}

}  // namespace loopserve::engine::native
