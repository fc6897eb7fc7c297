#include "engine/kernels/builtin.h"
#include "engine/kernels/dnnl/kernels.h"

namespace loopserve::engine {

void RegisterDnnlKernels(KernelRegistry& registry) {
  using reference::BinaryOp;
  using reference::UnaryOp;
  const std::pair<const char*, BinaryOp> binary_ops[] = {{"Add", BinaryOp::kAdd},
                                                         {"Sub", BinaryOp::kSub},
                                                         {"Mul", BinaryOp::kMul},
                                                         {"Div", BinaryOp::kDiv}};
  for (const auto& [name, op] : binary_ops) {
    registry.Register(
        name, [op = op](const KernelInit& init) { return CreateDnnlBinaryKernel(op, init); });
  }
  const std::pair<const char*, UnaryOp> unary_ops[] = {
      {"Relu", UnaryOp::kRelu}, {"Tanh", UnaryOp::kTanh}, {"Sigmoid", UnaryOp::kSigmoid},
      {"Exp", UnaryOp::kExp},   {"Log", UnaryOp::kLog},   {"Sqrt", UnaryOp::kSqrt},
      {"Abs", UnaryOp::kAbs},   {"Neg", UnaryOp::kNeg}};
  for (const auto& [name, op] : unary_ops) {
    registry.Register(
        name, [op = op](const KernelInit& init) { return CreateDnnlUnaryKernel(op, init); });
  }
  registry.Register("MatMul", CreateDnnlMatMulKernel);
  registry.Register("Gemm", CreateDnnlGemmKernel);
  registry.Register("Softmax", CreateDnnlSoftmaxKernel);
}

}  // namespace loopserve::engine
