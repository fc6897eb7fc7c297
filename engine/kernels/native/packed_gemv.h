#pragma once

// A row vector times a constant float matrix, y = act(x W + b): the one product of a batch-1
// recurrent or decoder body (an RNN cell, a greedy decoder's logits). For this shape the matmul
// is bound by reading W from L2, and oneDNN 2.6's fixed cost per primitive execute (argument-map
// construction, 4-6 heap allocations, brgemm dispatch: a quarter of a 1x256x256 iteration under
// perf) is as large as the arithmetic. This kernel packs W once, at load, into column panels
// that it streams in order, and fuses the bias and the activation into the epilogue:
// 1x256x256 + bias + tanh in 2.1 us against 2.9 us for the prepacked oneDNN primitive, and
// 1x256x1024 in 8.5 us against 11-14 us (this VM, one thread, bench/engine_bench.cc).
//
// Used only where it is measured faster: one row, float32, constant 2-D weights of at most
// kMaxElements, on a CPU with AVX-512F or AVX2+FMA (native::ActiveIsa(), checked at run time and
// capped by LOOPSERVE_MAX_ISA; elsewhere, and for every other shape, the oneDNN primitive runs).
// tanh is the rational approximation ONNX Runtime (MLAS) and Eigen use (a few ulp from std::tanh);
// sigmoid is 0.5 + 0.5 tanh(x / 2).

#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/tensor/tensor.h"

namespace loopserve::engine::native {

class PackedGemv {
 public:
  enum class Activation : uint8_t { kNone, kTanh, kRelu, kSigmoid };

  // Weights of more elements than this stay on oneDNN (large enough to be worth its threads).
  static constexpr int64_t kMaxElements = int64_t{1} << 20;

  // Whether ActiveIsa() is one the kernel is written for, and the kernel is enabled
  // (SetEnabled; on by default).
  static bool Available();
  // Turns the kernel off process-wide (tests and benchmarks compare against oneDNN). Thread-safe.
  static void SetEnabled(bool enabled);

  // Packs the row-major float32 [k, n] `weights` (copied; the tensor need not outlive this).
  // Requires Available(), k > 0, n > 0.
  PackedGemv(const Tensor& weights, Activation activation);

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }

  // y[0:n] = act(x[0:k] W + bias[0:n]); `bias` may be null. `y` must not alias `x`. Thread-safe.
  void Run(const float* x, const float* bias, float* y) const;

 private:
  int64_t k_ = 0;
  int64_t n_ = 0;
  Activation activation_ = Activation::kNone;
  Tensor packed_;  // [panels, k, kPanel], columns past n zero
  // Calls so far (relaxed; only its parity matters). Odd calls take the panels last to first: a
  // Loop body re-reads the same weights every iteration, and a body whose weights exceed L2 by a
  // little (a greedy decoder's 256 KB + 1 MB) then finds the panels it read last still in L2
  // instead of evicting each line just before its next use (LRU against a cyclic scan). Each
  // column's sum keeps its order, so the results do not depend on the direction.
  mutable std::atomic<uint32_t> calls_{0};
};

}  // namespace loopserve::engine::native
