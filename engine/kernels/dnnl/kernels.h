#pragma once

// Factories of the oneDNN kernels (registered by RegisterDnnlKernels in register.cc). Each
// validates the node's attributes at load and returns a kernel that computes f32 (and f16/bf16)
// with oneDNN and every other numeric type with the reference kernel.

#include <memory>

#include "absl/status/statusor.h"
#include "engine/kernels/reference/reference.h"
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
absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlSoftmaxKernel(const KernelInit& init);

}  // namespace loopserve::engine
