#pragma once

// The int8 products with a constant B that oneDNN's brgemm matmul runs faster than Int8Gemm: on a
// CPU with AMX-INT8 its tile kernels (`brg:avx512_core_amx_int8`). Measured on a 2-vCPU Sapphire
// Rapids (1 thread, uint8 x int8 -> int32 with a runtime source zero point, bit-equal results,
// Int8Gemm's panels 64-byte aligned), oneDNN against Int8Gemm's VNNI tiles: 1x512x512 3.2 us
// against 1.8, 2x512x512 3.2 against 2.9, 4x512x512 3.0 against 7.7, 8x512x512 4.1 against 10.5,
// 16x512x512 4.9 against 11.8; 4x128x128 1.58 against 0.26, 16x128x128 1.85 against 1.81 (a
// primitive's execute costs more than a small product: kMinRows, kMinMultiplyAdds). Taken only
// when the primitive oneDNN picks is a brgemm one: its AVX2 `gemm:jit` saturates vpmaddubsw's
// 16-bit sums (results differ), and `ref:` is slow.
//
// B (uint8 moved to int8 by -128, as in Int8Gemm) is reordered into the primitive's layout once per
// row count m, at the first product of that many rows; A is uint8 (an int8 A is moved by +128 by
// the caller) with one zero point; a B zero point other than 0 is applied after the product (y -=
// zb'_j (rowsum_i - k za')). Thread-safe: the prepared products are immutable and shared; each
// frame binds its buffers in its own DnnlInt8GemmBinding.

#include <cstdint>
#include <dnnl.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/runtime/run_context.h"

namespace loopserve::engine::native {

class DnnlInt8Gemm;

// A frame's memory objects for one prepared row count (rebound to each run's buffers). Not
// thread-safe.
struct DnnlInt8GemmBinding {
  int64_t m = -1;
  std::shared_ptr<const void> prepared;  // keeps the primitive the memories belong to alive
  dnnl::memory src, dst, zero, scratchpad;
  int32_t zero_value = 0;
  std::vector<int32_t> row_sum;
};

class DnnlInt8Gemm {
 public:
  // Products of fewer rows or multiply-adds stay on Int8Gemm (measured above).
  static constexpr int64_t kMinMultiplyAdds = int64_t{1} << 17;
  static constexpr int64_t kMinRows = 4;

  // Turns the oneDNN int8 paths off process-wide, this one and ConvInteger's (tests and
  // benchmarks compare against the native kernels).
  static void SetEnabled(bool enabled);
  static bool Enabled();

  // B the [k, n] row-major uint8 (int8 when `b_signed`) constant; copied.
  DnnlInt8Gemm(const void* b, bool b_signed, int64_t k, int64_t n);

  // Whether the path is enabled and oneDNN has a brgemm kernel for m rows (prepared and cached on
  // the first call for m).
  bool Usable(int64_t m) const;

  // y[m, n] = (A - a_zero)(B - b_zero) for A' the [m, k] uint8 matrix (a_zero already moved
  // with it), b_zero 1 or n values of B's type (null: 0). Requires Usable(m).
  absl::Status Run(const uint8_t* a, int64_t m, int32_t a_zero, const void* b_zero,
                   int64_t b_zero_count, int32_t* y, DnnlInt8GemmBinding& binding,
                   RunContext& run) const;

  // The implementation oneDNN chose for m rows ("" when none is prepared).
  std::string ImplName(int64_t m) const;

 private:
  struct Prepared;
  std::shared_ptr<const Prepared> Prepare(int64_t m) const;

  int64_t k_, n_;
  bool b_signed_;
  std::vector<int8_t> b_;  // B', [k, n]
  mutable absl::Mutex mu_;
  // One per row count asked for (null when oneDNN has no brgemm kernel for it).
  mutable std::vector<std::pair<int64_t, std::shared_ptr<const Prepared>>> prepared_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace loopserve::engine::native
