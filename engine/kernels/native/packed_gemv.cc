#include "engine/kernels/native/packed_gemv.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/kernels/backend.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/rational_tanh.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 min/max intrinsics pass _mm512_undefined_ps() as the unused merge source,
// which -Wmaybe-uninitialized reports once they are inlined (a known false positive).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define LS_PACKED_GEMV_X86 1
#endif

namespace loopserve::engine::native {
namespace {

// Columns per panel. A panel is stored k rows of kPanel contiguous floats, so the kernel reads W
// front to back once; 128 columns are 8 AVX-512 (16 AVX2) accumulators, which leaves registers
// for a second set that splits the k loop into two independent FMA chains.
constexpr int64_t kPanel = 128;

std::atomic<bool> g_enabled{true};

#if defined(LS_PACKED_GEMV_X86)

using rational_tanh::Sigmoid256;
using rational_tanh::Sigmoid512;
using rational_tanh::Tanh256;
using rational_tanh::Tanh512;

__attribute__((target("avx512f,fma"))) __m512 Activate512(__m512 v,
                                                          PackedGemv::Activation activation) {
  switch (activation) {
    case PackedGemv::Activation::kNone:
      return v;
    case PackedGemv::Activation::kTanh:
      return Tanh512(v);
    case PackedGemv::Activation::kRelu:
      return _mm512_max_ps(v, _mm512_setzero_ps());
    case PackedGemv::Activation::kSigmoid:
      return Sigmoid512(v);
  }
  return v;
}

__attribute__((target("avx512f,fma"))) void RunAvx512(const float* x, const float* packed,
                                                      int64_t k, int64_t n, const float* bias,
                                                      PackedGemv::Activation activation,
                                                      bool reverse, float* y) {
  constexpr int kVectors = kPanel / 16;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t col0 = (reverse ? panels - 1 - p : p) * kPanel;
    const float* w = packed + col0 * k;
    __m512 even[kVectors];
    __m512 odd[kVectors];
    for (int j = 0; j < kVectors; ++j) {
      even[j] = _mm512_setzero_ps();
      odd[j] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 2 <= k; i += 2, w += 2 * kPanel) {
      const __m512 x0 = _mm512_set1_ps(x[i]);
      const __m512 x1 = _mm512_set1_ps(x[i + 1]);
      for (int j = 0; j < kVectors; ++j) {
        even[j] = _mm512_fmadd_ps(x0, _mm512_load_ps(w + 16 * j), even[j]);
      }
      for (int j = 0; j < kVectors; ++j) {
        odd[j] = _mm512_fmadd_ps(x1, _mm512_load_ps(w + kPanel + 16 * j), odd[j]);
      }
    }
    if (i < k) {
      const __m512 x0 = _mm512_set1_ps(x[i]);
      for (int j = 0; j < kVectors; ++j) {
        even[j] = _mm512_fmadd_ps(x0, _mm512_load_ps(w + 16 * j), even[j]);
      }
    }
    for (int j = 0; j < kVectors; ++j) {
      const int64_t col = col0 + 16 * j;
      if (col >= n) break;
      const int64_t left = n - col;
      const __mmask16 mask =
          left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
      __m512 v = _mm512_add_ps(even[j], odd[j]);
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + col));
      _mm512_mask_storeu_ps(y + col, mask, Activate512(v, activation));
    }
  }
}

__attribute__((target("avx2,fma"))) __m256 Activate256(__m256 v,
                                                       PackedGemv::Activation activation) {
  switch (activation) {
    case PackedGemv::Activation::kNone:
      return v;
    case PackedGemv::Activation::kTanh:
      return Tanh256(v);
    case PackedGemv::Activation::kRelu:
      return _mm256_max_ps(v, _mm256_setzero_ps());
    case PackedGemv::Activation::kSigmoid:
      return Sigmoid256(v);
  }
  return v;
}

__attribute__((target("avx2,fma"))) void RunAvx2(const float* x, const float* packed, int64_t k,
                                                 int64_t n, const float* bias,
                                                 PackedGemv::Activation activation, bool reverse,
                                                 float* y) {
  constexpr int kVectors = kPanel / 8;  // 16 accumulators: enough independent FMA chains
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int64_t panels = (n + kPanel - 1) / kPanel;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t col0 = (reverse ? panels - 1 - p : p) * kPanel;
    const float* w = packed + col0 * k;
    __m256 acc[kVectors];
    for (int j = 0; j < kVectors; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; ++i, w += kPanel) {
      const __m256 xi = _mm256_set1_ps(x[i]);
      for (int j = 0; j < kVectors; ++j) {
        acc[j] = _mm256_fmadd_ps(xi, _mm256_load_ps(w + 8 * j), acc[j]);
      }
    }
    for (int j = 0; j < kVectors; ++j) {
      const int64_t col = col0 + 8 * j;
      if (col >= n) break;
      const int left = static_cast<int>(std::min<int64_t>(n - col, 8));
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lanes);
      __m256 v = acc[j];
      if (bias != nullptr) v = _mm256_add_ps(v, _mm256_maskload_ps(bias + col, mask));
      _mm256_maskstore_ps(y + col, mask, Activate256(v, activation));
    }
  }
}

#endif  // LS_PACKED_GEMV_X86

}  // namespace

bool PackedGemv::Available() {
  return ActiveBackend().packed_gemv && g_enabled.load(std::memory_order_relaxed);
}

void PackedGemv::SetEnabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }

PackedGemv::PackedGemv(const Tensor& weights, Activation activation)
    : k_(weights.dim(0)), n_(weights.dim(1)), activation_(activation) {
  const int64_t panels = (n_ + kPanel - 1) / kPanel;
  packed_.Resize(DataType::kFloat32, Shape{panels, k_, kPanel});
  float* dst = packed_.mutable_data<float>();
  std::memset(dst, 0, packed_.ByteSize());
  const float* src = weights.data<float>();
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t col0 = p * kPanel;
    const int64_t width = std::min(kPanel, n_ - col0);
    for (int64_t i = 0; i < k_; ++i) {
      std::memcpy(dst + (p * k_ + i) * kPanel, src + i * n_ + col0,
                  static_cast<size_t>(width) * sizeof(float));
    }
  }
}

void PackedGemv::Run(const float* x, const float* bias, float* y) const {
#if defined(LS_PACKED_GEMV_X86)
  // A kernel prepared under AVX-512 whose cap was lowered later runs the AVX2 loop (same packing);
  // one prepared while the cap was scalar is never built (Available() was false).
  const uint32_t call = calls_.load(std::memory_order_relaxed);
  calls_.store(call + 1, std::memory_order_relaxed);
  const bool reverse = (call & 1) != 0;
  if (ActiveIsa() == Isa::kAvx512) {
    RunAvx512(x, packed_.data<float>(), k_, n_, bias, activation_, reverse, y);
  } else {
    RunAvx2(x, packed_.data<float>(), k_, n_, bias, activation_, reverse, y);
  }
#else
  (void)x;
  (void)bias;
  (void)y;
#endif
}

}  // namespace loopserve::engine::native
