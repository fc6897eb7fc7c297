#pragma once

// Rows times a constant float matrix, Y = X W + b, for the products of batched recurrent and MLP
// bodies ([m, k] x [k, n], m = 2 .. a few hundred) on AVX2 + FMA3 CPUs. oneDNN 2.6 has brgemm
// matmul kernels only from AVX-512; below it a matmul is its sgemm, which packs the weights again
// on every execute, and the best it offers (a 1x1 convolution on blocked layouts, with the source
// and result reordered around it) reaches 81% of the FMA peak on average and 39% at worst over the
// grid's 52 product shapes; OpenBLAS (65%) and XNNPACK's FMA3 kernels (30%) do no better
// (bench/RESULTS.md, "AVX2 GEMM"). This kernel packs W once, at load, into 24-column panels (k
// rows of 24 contiguous floats; the last panel as many whole vectors wide as its columns need,
// the columns past n zero) and computes each panel's rows in tiles of up to 4 rows x 24 columns
// held in 12 ymm accumulators (BLIS-style register blocking for 16 ymm registers), the panel
// staying in L1/L2 across the row tiles and X read in place; a bias row, an addend matrix (an
// RNN cell's other product) and Tanh/Relu/Sigmoid are applied to each tile while it is in
// registers (no pass of their own over the result). Rounding differs from oneDNN's by the order of
// the sums only.
//
// Used where measured faster than the oneDNN path: float32, constant 2-D weights, more than one
// row, native::ActiveIsa() == Isa::kAvx2 (the AVX-512 path keeps oneDNN's brgemm kernels).
// Immutable after construction: Run may be called from many threads at once.

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/kernels/native/packed_gemv.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine::native {

class PackedGemm {
 public:
  // Columns per packed panel: three ymm vectors on AVX2, three zmm vectors on AVX-512 (the ISA
  // active when the weights are packed; the packing keeps its ISA).
  static constexpr int64_t kPanelAvx2 = 24;
  static constexpr int64_t kPanelAvx512 = 48;
  // On AVX-512, products of more rows keep oneDNN's brgemm (blocked over rows and depth; this
  // kernel re-reads a panel per 8-row tile and all of x per panel).
  static constexpr int64_t kMaxRowsAvx512 = 128;

  // Whether ActiveIsa() is one the kernel is written for (AVX2 + FMA, or AVX-512F), and the
  // kernel is enabled (SetEnabled; on by default).
  static bool Available();
  // Whether a product of `rows` rows should run here rather than on oneDNN: Available(), and on
  // AVX-512 at most kMaxRowsAvx512 rows.
  static bool Preferred(int64_t rows);
  // Turns the kernel off process-wide (tests and benchmarks compare against oneDNN). Thread-safe.
  static void SetEnabled(bool enabled);

  // Packs alpha * W, W the float32 [k, n] matrix at `weights` (row-major), or its transpose when
  // `transposed` (then stored [n, k], as Gemm's transB and nn.Linear keep it). Copied: the
  // buffer need not outlive this. Requires k > 0, n > 0.
  PackedGemm(const float* weights, int64_t k, int64_t n, bool transposed, float alpha = 1.0f);

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  // Columns per panel of this packing (kPanelAvx2 or kPanelAvx512).
  int64_t panel() const { return panel_; }
  int64_t panels() const { return (n_ + panel_ - 1) / panel_; }

  // What is applied to each register tile before it is stored:
  // y = act(x W + addend + bias_scale * bias).
  struct Epilogue {
    const float* bias = nullptr;    // n values added to every row (times bias_scale), or null
    float bias_scale = 1.0f;        // Gemm's beta
    const float* addend = nullptr;  // an [m, n] row-major matrix added, or null (may be y)
    PackedGemv::Activation activation = PackedGemv::Activation::kNone;  // tanh: MLAS's rational
    bool bias_first = false;  // (x W + bias) + addend, the order of the Adds it replaces
  };

  // y[m, n] = epilogue(x[m, k] W) (row-major, contiguous). `y` must not alias `x`. Requires
  // Available() when it is called on an x86 CPU (else it does nothing).
  void Run(const float* x, int64_t m, const Epilogue& epilogue, float* y) const {
    RunPanels(x, m, epilogue, y, 0, panels());
  }
  // The columns of panels [first, last) only (a share of the product for one thread).
  void RunPanels(const float* x, int64_t m, const Epilogue& epilogue, float* y, int64_t first,
                 int64_t last) const;

 private:
  void RunPanels512(const float* x, int64_t m, const Epilogue& epilogue, float* y, int64_t first,
                    int64_t last) const;

  int64_t k_ = 0;
  int64_t n_ = 0;
  bool avx512_ = false;  // packed for (and run on) the AVX-512 tiles
  int64_t panel_ = kPanelAvx2;
  Tensor packed_;  // panel p: k rows of its width at offset p * panel_ * k; columns past n zero
};

// One constant operand's PackedGemm, packed by the first caller and shared by the rest: a MatMul
// or Gemm kernel prepares a signature per input shape, and they differ in rows only. Thread-safe.
class PackedGemmOnce {
 public:
  std::shared_ptr<const PackedGemm> Get(const float* weights, int64_t k, int64_t n, bool transposed,
                                        float alpha = 1.0f) const {
    absl::MutexLock lock(&mu_);
    if (gemm_ == nullptr) {
      gemm_ = std::make_shared<const PackedGemm>(weights, k, n, transposed, alpha);
    }
    return gemm_;
  }

 private:
  mutable absl::Mutex mu_;
  mutable std::shared_ptr<const PackedGemm> gemm_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loopserve::engine::native
