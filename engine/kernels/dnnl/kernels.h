#pragma once

// Factories of the oneDNN kernels (registered by RegisterDnnlKernels in register.cc). Each
// validates the node's attributes at load and returns a kernel that computes f32 (and f16/bf16)
// with oneDNN and every other numeric type with the reference kernel.

#include <memory>

#include "absl/status/statusor.h"
#include "engine/kernels/reference/reference.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/kernel.h"

namespace loopserve::engine {

// Add, Sub, Mul, Div: numpy broadcasting (opset >= 7), or the legacy `broadcast`/`axis`
// attributes (opset < 7).
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlBinaryKernel(reference::BinaryOp op,
                                                               const KernelInit& init);

// Relu, Tanh, Sigmoid, Exp, Log, Sqrt, Abs, Neg.
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlUnaryKernel(reference::UnaryOp op,
                                                              const KernelInit& init);

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlMatMulKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlGemmKernel(const KernelInit& init);
// kFusedMatMulOp (engine/ir/fusion.h): MatMul (operands read transposed or not) and post-ops.
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlFusedMatMulKernel(const KernelInit& init);
// kElementwiseOp (engine/ir/fusion.h): input 0 and post-ops, on native vector code.
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlElementwiseKernel(const KernelInit& init);
// Softmax, or LogSoftmax with `log`.
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlSoftmaxKernel(const KernelInit& init, bool log);

// LeakyRelu, Elu, HardSwish, Softplus on oneDNN; Selu, HardSigmoid, Softsign, Celu on the
// reference (oneDNN 2.6 has no such eltwise).
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlActivationKernel(reference::ActivationOp op,
                                                                   const KernelInit& init);
// PRelu; the slope broadcasts onto X (opset >= 7) or has X's trailing shape (older opsets).
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlPReluKernel(const KernelInit& init);

// Conv: 1-D to 3-D on oneDNN (more spatial dims on the reference).
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlConvKernel(const KernelInit& init);
// ConvInteger and QLinearConv (int_conv.cc): int32 products of im2col with the weights, zero
// points subtracted; natively (oneDNN 2.6's int8 convolution takes neither uint8 weights nor
// weight zero points, which these ops allow).
absl::StatusOr<std::unique_ptr<Kernel>> CreateConvIntegerKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateQLinearConvKernel(const KernelInit& init);
// ConvTranspose: 1-D to 3-D on oneDNN's deconvolution; extended outputs on the reference.
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlConvTransposeKernel(const KernelInit& init);
// `_BlockedToPlain` (layout.cc): a blocked [N, C / b, H, W, b] tensor reordered into [N, C, H, W]
// (engine/transform/blocked_layout.h).
absl::StatusOr<std::unique_ptr<Kernel>> CreateBlockedToPlainKernel(const KernelInit& init);
// `_PlainToBlocked` (layout.cc): a plain tensor of rank <= 4 reordered into the chain's layout.
absl::StatusOr<std::unique_ptr<Kernel>> CreatePlainToBlockedKernel(const KernelInit& init);
// MaxPool (Indices on the reference), AveragePool, LpPool (reference only).
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlPoolKernel(reference::PoolKind kind,
                                                             const KernelInit& init);
// GlobalMaxPool, GlobalAveragePool.
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlGlobalPoolKernel(reference::PoolKind kind,
                                                                   const KernelInit& init);

// BatchNormalization (inference only: training mode is Unimplemented), InstanceNormalization,
// LayerNormalization (opset 17, with the Mean and InvStdDev outputs), LRN.
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlBatchNormKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlInstanceNormKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlLayerNormKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlLrnKernel(const KernelInit& init);

// RNN, GRU, LSTM (recurrent.cc): oneDNN's RNN primitives, the native implementation
// (kernels/native/recurrent.h) for what they lack.
void RegisterDnnlRecurrentKernels(KernelRegistry& registry);

}  // namespace loopserve::engine
