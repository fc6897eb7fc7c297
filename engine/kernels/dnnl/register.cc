#include "engine/ir/fusion.h"
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
  registry.Register(kFusedMatMulOp, CreateDnnlFusedMatMulKernel);
  registry.Register(kElementwiseOp, CreateDnnlElementwiseKernel);
  registry.Register("Softmax",
                    [](const KernelInit& init) { return CreateDnnlSoftmaxKernel(init, false); });
  registry.Register("LogSoftmax",
                    [](const KernelInit& init) { return CreateDnnlSoftmaxKernel(init, true); });

  using reference::ActivationOp;
  const std::pair<const char*, ActivationOp> activations[] = {
      {"LeakyRelu", ActivationOp::kLeakyRelu}, {"Elu", ActivationOp::kElu},
      {"Selu", ActivationOp::kSelu},           {"HardSigmoid", ActivationOp::kHardSigmoid},
      {"HardSwish", ActivationOp::kHardSwish}, {"Softplus", ActivationOp::kSoftplus},
      {"Softsign", ActivationOp::kSoftsign},   {"Celu", ActivationOp::kCelu}};
  for (const auto& [name, op] : activations) {
    registry.Register(
        name, [op = op](const KernelInit& init) { return CreateDnnlActivationKernel(op, init); });
  }
  registry.Register("PRelu", CreateDnnlPReluKernel);

  using reference::PoolKind;
  registry.Register("Conv", CreateDnnlConvKernel);
  registry.Register("ConvTranspose", CreateDnnlConvTransposeKernel);
  registry.Register("_BlockedToPlain", CreateBlockedToPlainKernel);  // transform/blocked_layout.h
  registry.Register("_PlainToBlocked", CreatePlainToBlockedKernel);
  registry.Register("ConvInteger", CreateConvIntegerKernel, 10);
  registry.Register("QLinearConv", CreateQLinearConvKernel, 10);
  // LpPool is a native kernel (native/pooling_extra.cc).
  const std::pair<const char*, PoolKind> pools[] = {{"MaxPool", PoolKind::kMax},
                                                    {"AveragePool", PoolKind::kAverage}};
  for (const auto& [name, kind] : pools) {
    registry.Register(
        name, [kind = kind](const KernelInit& init) { return CreateDnnlPoolKernel(kind, init); });
  }
  registry.Register("GlobalMaxPool", [](const KernelInit& init) {
    return CreateDnnlGlobalPoolKernel(PoolKind::kMax, init);
  });
  registry.Register("GlobalAveragePool", [](const KernelInit& init) {
    return CreateDnnlGlobalPoolKernel(PoolKind::kAverage, init);
  });

  registry.Register("BatchNormalization", CreateDnnlBatchNormKernel);
  registry.Register("InstanceNormalization", CreateDnnlInstanceNormKernel);
  registry.Register("LayerNormalization", CreateDnnlLayerNormKernel, /*min_opset=*/17);
  registry.Register("LRN", CreateDnnlLrnKernel);
  RegisterDnnlRecurrentKernels(registry);
}

}  // namespace loopserve::engine
