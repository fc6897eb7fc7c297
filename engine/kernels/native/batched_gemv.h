#pragma once

// Batched float32 products where each batch item is a matrix-vector product (M = 1 or N = 1),
// operands not constant: attention with one query (q K^T, p V, memory @ q) and other per-step
// products whose shapes change every iteration. A oneDNN primitive would be created for every
// new shape (20-300 us each: a growing KV cache changes it every iteration) and its brgemm
// kernels are inefficient at M = 1 / N = 1; these products stream their matrix once, as dot
// products (contiguous reduction dim) or row updates (axpy), with vector_math's kernels.
//
// A value type made by Prepare; Run is pure: thread-safe.

#include <cstdint>
#include <vector>

#include "engine/kernels/reference/reference.h"

namespace loopserve::engine::native {

class BatchedGemv {
 public:
  // For the product of `dims` (reference::MatMulShapes of the logical operands), A read
  // transposed when `trans_a` (stored [..., k, m]) and B when `trans_b` (stored [..., n, k]).
  // Only for dims.m == 1 or dims.n == 1 (Applies).
  static bool Applies(const reference::MatMulDims& dims) { return dims.m == 1 || dims.n == 1; }
  BatchedGemv(const reference::MatMulDims& dims, bool trans_a, bool trans_b);

  // out[batch..., m, n] = A x B.
  void Run(const float* a, const float* b, float* out) const;

 private:
  int64_t m_, n_, k_;
  bool trans_a_, trans_b_;
  std::vector<int64_t> a_offsets_;  // per output batch item: element offset into A
  std::vector<int64_t> b_offsets_;  // and into B
};

}  // namespace loopserve::engine::native
