#pragma once

// Fused nodes: what engine/transform's passes make of chains of ops, with typed attributes (not
// op names in strings). A fused node keeps its primary op (a product, or the first elementwise
// operand) and a list of post-ops applied in order to its result, each an elementwise function or
// a binary op with another of the node's inputs (the rows of engine/ir/eltwise_fn.h). Kernels map
// post-ops onto oneDNN post-ops or native vector code; `unfused` keeps the original nodes for
// element types the fused kernel does not compute (it then runs them as they were).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/ir/eltwise_fn.h"

namespace loopserve::engine {

class Graph;

struct PostOp {
  enum class Kind : uint8_t { kUnary, kBinary };
  Kind kind = Kind::kUnary;
  EltwiseFn fn = EltwiseFn::kRelu;  // kUnary
  float alpha = 0.0f;
  float beta = 0.0f;
  ArithOp op = ArithOp::kAdd;  // kBinary
  int input = -1;              // kBinary: the node input that is the other operand
  bool input_first = false;    // kBinary: input op value (else value op input)

  static PostOp Unary(EltwiseFn fn, float alpha = 0.0f, float beta = 0.0f);
  static PostOp Binary(ArithOp op, int input, bool input_first = false);
};

struct FusionSpec {
  std::vector<PostOp> post_ops;
  // kFusedMatMulOp: the last two dims of A / B are read transposed (a Transpose folded in).
  bool trans_a = false;
  bool trans_b = false;
  // The nodes this one replaced, as a graph whose inputs are the fused node's inputs and whose
  // output is its output; compiled without transforms and run for element types the fused
  // kernel does not compute.
  std::shared_ptr<const Graph> unfused;
};

// Internal op types made by engine/transform (the leading underscore keeps them out of ONNX's
// namespace). Each carries a FusionSpec in Node::fusion.
//   kFusedMatMulOp: inputs (A, B, operands...): numpy MatMul of A and B (transposes per the
//     spec), then the post-ops, whose binary operands are inputs 2, 3, ...
//   kElementwiseOp: inputs (x, operands...): x, then the post-ops.
inline constexpr char kFusedMatMulOp[] = "_FusedMatMul";
inline constexpr char kElementwiseOp[] = "_Elementwise";
//   kFusedMatMulIntegerOp: inputs (A, B, a_zero_point, b_zero_point, operands...), the zero points
//     possibly omitted: MatMulInteger of A and B converted to float32, then the post-ops, whose
//     binary operands are inputs 4, 5, ... (engine/transform/fuse_int_matmul.h).
inline constexpr char kFusedMatMulIntegerOp[] = "_FusedMatMulInteger";
//   kBf16MatMulOp: inputs (A, B, operands...), B a constant float32 matrix: MatMul of A and B in
//     bfloat16 with float32 accumulation, then the post-ops, whose binary operands are inputs 2,
//     3, ... (engine/transform/bf16_products.h; only with LoadOptions::precision = kBf16).
inline constexpr char kBf16MatMulOp[] = "_MatMulBf16";

// "MatMul(trans_b) -> Add(in2) -> Tanh" style text for plan dumps.
std::string DescribeFusion(const std::string& op_type, const FusionSpec& spec);

}  // namespace loopserve::engine
