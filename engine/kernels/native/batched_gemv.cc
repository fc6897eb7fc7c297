#include "engine/kernels/native/batched_gemv.h"

#include <cstring>

#include "engine/kernels/native/vector_math.h"

namespace loopserve::engine::native {

BatchedGemv::BatchedGemv(const reference::MatMulDims& dims, bool trans_a, bool trans_b)
    : m_(dims.m), n_(dims.n), k_(dims.k), trans_a_(trans_a), trans_b_(trans_b) {
  // Walk the output batch index; an operand broadcast along a batch dim stays put there.
  const int rank = dims.batch.rank();
  const int64_t count = dims.batch.NumElements();
  a_offsets_.reserve(count);
  b_offsets_.reserve(count);
  std::vector<int64_t> index(rank, 0);
  std::vector<int64_t> a_strides(rank), b_strides(rank);
  int64_t a_stride = m_ * k_;
  int64_t b_stride = k_ * n_;
  for (int d = rank - 1; d >= 0; --d) {
    a_strides[d] = dims.a_batch[d] == 1 ? 0 : a_stride;
    b_strides[d] = dims.b_batch[d] == 1 ? 0 : b_stride;
    a_stride *= dims.a_batch[d];
    b_stride *= dims.b_batch[d];
  }
  for (int64_t i = 0; i < count; ++i) {
    int64_t a_off = 0, b_off = 0;
    for (int d = 0; d < rank; ++d) {
      a_off += index[d] * a_strides[d];
      b_off += index[d] * b_strides[d];
    }
    a_offsets_.push_back(a_off);
    b_offsets_.push_back(b_off);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < dims.batch[d]) break;
      index[d] = 0;
    }
  }
}

void BatchedGemv::Run(const float* a, const float* b, float* out) const {
  const int64_t count = static_cast<int64_t>(a_offsets_.size());
  for (int64_t i = 0; i < count; ++i) {
    const float* pa = a + a_offsets_[i];
    const float* pb = b + b_offsets_[i];
    float* po = out + i * m_ * n_;
    if (k_ == 0) {
      std::memset(po, 0, static_cast<size_t>(m_ * n_) * sizeof(float));
    } else if (m_ == 1) {
      // out[j] = sum_k a[k] B[k, j].
      if (trans_b_) {  // B stored [n, k]: a dot product per column
        RowDotsF32(pa, pb, k_, n_, po);
      } else {
        VecMatF32(pa, pb, n_, k_, n_, po);
      }
    } else {
      // n == 1: out[r] = sum_k A[r, k] b[k].
      if (trans_a_) {  // A stored [k, m]: b times A^T's [k, m] storage
        VecMatF32(pb, pa, m_, k_, m_, po);
      } else {
        RowDotsF32(pb, pa, k_, m_, po);
      }
    }
  }
}

}  // namespace loopserve::engine::native
