#include "engine/ir/fusion.h"

#include "absl/strings/str_cat.h"

namespace loopserve::engine {

PostOp PostOp::Unary(EltwiseFn fn, float alpha, float beta) {
  PostOp p;
  p.kind = Kind::kUnary;
  p.fn = fn;
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

PostOp PostOp::Binary(ArithOp op, int input, bool input_first) {
  PostOp p;
  p.kind = Kind::kBinary;
  p.op = op;
  p.input = input;
  p.input_first = input_first;
  return p;
}

std::string DescribeFusion(const std::string& op_type, const FusionSpec& spec) {
  std::string text = op_type == kFusedMatMulOp   ? "MatMul"
                     : op_type == kElementwiseOp ? "in0"
                                                 : op_type;
  if (spec.trans_a || spec.trans_b) {
    absl::StrAppend(&text, "(", spec.trans_a ? "trans_a" : "",
                    spec.trans_a && spec.trans_b ? "," : "", spec.trans_b ? "trans_b" : "", ")");
  }
  for (const PostOp& p : spec.post_ops) {
    if (p.kind == PostOp::Kind::kUnary) {
      absl::StrAppend(&text, " -> ", EltwiseFnName(p.fn));
      if (p.fn == EltwiseFn::kPow || p.fn == EltwiseFn::kLinear || p.fn == EltwiseFn::kClip ||
          p.fn == EltwiseFn::kLeakyRelu || p.fn == EltwiseFn::kElu ||
          p.fn == EltwiseFn::kHardSigmoid) {
        absl::StrAppend(&text, "(", p.alpha, ",", p.beta, ")");
      }
    } else {
      absl::StrAppend(&text, " -> ", ArithOpName(p.op),
                      p.input_first ? absl::StrCat("(in", p.input, ", .)")
                                    : absl::StrCat("(., in", p.input, ")"));
    }
  }
  return text;
}

}  // namespace loopserve::engine
