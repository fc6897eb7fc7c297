#include "engine/kernels/native/packed_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/kernels/native/cpu_isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LS_PACKED_GEMM_X86 1
#endif

namespace loopserve::engine::native {
namespace {

// Rows per register tile: 6 rows x 2 vectors = 12 accumulators, 2 registers for the panel's row
// of 16 weights and 1 for the broadcast x value (16 ymm registers).
constexpr int kMaxTileRows = 6;

std::atomic<bool> g_enabled{true};

#if defined(LS_PACKED_GEMM_X86)

// One row of a tile: its two accumulators, updated by the broadcast x value when the tile has
// at least `r` + 1 rows. Named registers, not an array: GCC keeps an array of __m256 in memory
// across the k loop (a store per FMA: 40% of the peak instead of 90%).
#define LS_GEMM_ROW_DECL(r) __m256 lo##r = _mm256_setzero_ps(), hi##r = _mm256_setzero_ps()
#define LS_GEMM_ROW_FMA(r)                                 \
  if constexpr (R > r) {                                   \
    const __m256 x = _mm256_broadcast_ss(a + r * lda + p); \
    lo##r = _mm256_fmadd_ps(x, b0, lo##r);                 \
    hi##r = _mm256_fmadd_ps(x, b1, hi##r);                 \
  }
#define LS_GEMM_ROW_STORE(r) \
  if constexpr (R > r) Store(lo##r, hi##r, bias, c + r * ldc, cols)

// c[0:16] (or c[0:cols] for cols < 16) = (lo, hi) + bias (bias may be null).
__attribute__((target("avx2,fma"))) inline void Store(__m256 lo, __m256 hi, const float* bias,
                                                      float* c, int64_t cols) {
  if (cols == PackedGemm::kPanel) {
    if (bias != nullptr) {
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(bias));
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(bias + 8));
    }
    _mm256_storeu_ps(c, lo);
    _mm256_storeu_ps(c + 8, hi);
    return;
  }
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols)), lanes);
  const __m256i mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols) - 8), lanes);
  if (bias != nullptr) {
    // A lane whose mask is off is not read (no fault past the end of the bias).
    lo = _mm256_add_ps(lo, _mm256_maskload_ps(bias, mask0));
    hi = _mm256_add_ps(hi, _mm256_maskload_ps(bias + 8, mask1));
  }
  _mm256_maskstore_ps(c, mask0, lo);
  _mm256_maskstore_ps(c + 8, mask1, hi);
}

// c[0:R, 0:cols] = a[0:R, 0:k] b + bias, b one packed panel (k rows of 16 floats), a and c
// row-major with row strides lda and ldc, cols <= 16.
template <int R>
__attribute__((target("avx2,fma"))) void Tile(const float* a, int64_t lda, const float* b,
                                              int64_t k, const float* bias, float* c, int64_t ldc,
                                              int64_t cols) {
  LS_GEMM_ROW_DECL(0);
  LS_GEMM_ROW_DECL(1);
  LS_GEMM_ROW_DECL(2);
  LS_GEMM_ROW_DECL(3);
  LS_GEMM_ROW_DECL(4);
  LS_GEMM_ROW_DECL(5);
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b + p * PackedGemm::kPanel);
    const __m256 b1 = _mm256_loadu_ps(b + p * PackedGemm::kPanel + 8);
    LS_GEMM_ROW_FMA(0)
    LS_GEMM_ROW_FMA(1)
    LS_GEMM_ROW_FMA(2)
    LS_GEMM_ROW_FMA(3)
    LS_GEMM_ROW_FMA(4)
    LS_GEMM_ROW_FMA(5)
  }
  LS_GEMM_ROW_STORE(0);
  LS_GEMM_ROW_STORE(1);
  LS_GEMM_ROW_STORE(2);
  LS_GEMM_ROW_STORE(3);
  LS_GEMM_ROW_STORE(4);
  LS_GEMM_ROW_STORE(5);
}

#undef LS_GEMM_ROW_DECL
#undef LS_GEMM_ROW_FMA
#undef LS_GEMM_ROW_STORE

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, const float*, float*, int64_t,
                        int64_t);
constexpr TileFn kTiles[kMaxTileRows + 1] = {nullptr, Tile<1>, Tile<2>, Tile<3>,
                                             Tile<4>, Tile<5>, Tile<6>};

#endif  // LS_PACKED_GEMM_X86

}  // namespace

bool PackedGemm::Available() {
  return ActiveIsa() == Isa::kAvx2 && g_enabled.load(std::memory_order_relaxed);
}

void PackedGemm::SetEnabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }

PackedGemm::PackedGemm(const float* weights, int64_t k, int64_t n, bool transposed, float alpha)
    : k_(k), n_(n) {
  packed_.Resize(DataType::kFloat32, Shape{panels(), k_, kPanel});
  float* dst = packed_.mutable_data<float>();
  std::memset(dst, 0, packed_.ByteSize());
  for (int64_t p = 0; p < panels(); ++p) {
    const int64_t col0 = p * kPanel;
    const int64_t width = std::min(kPanel, n_ - col0);
    for (int64_t i = 0; i < k_; ++i) {
      float* row = dst + (p * k_ + i) * kPanel;
      for (int64_t j = 0; j < width; ++j) {
        const int64_t col = col0 + j;
        row[j] = alpha * (transposed ? weights[col * k_ + i] : weights[i * n_ + col]);
      }
    }
  }
}

void PackedGemm::RunPanels(const float* x, int64_t m, const float* bias, float* y, int64_t first,
                           int64_t last) const {
#if defined(LS_PACKED_GEMM_X86)
  if (m <= 0) return;
  // Rows spread evenly over the fewest tiles of at most kMaxTileRows (16 rows: 6 + 5 + 5, not
  // 6 + 6 + 4: a 4-row tile has 8 accumulators, barely enough to hide the FMA latency).
  const int64_t tiles = (m + kMaxTileRows - 1) / kMaxTileRows;
  const int64_t base = m / tiles;
  const int64_t extra = m % tiles;
  const float* packed = packed_.data<float>();
  for (int64_t p = first; p < last; ++p) {
    const int64_t col0 = p * kPanel;
    const int64_t cols = std::min(kPanel, n_ - col0);
    const float* panel = packed + p * k_ * kPanel;
    const float* panel_bias = bias != nullptr ? bias + col0 : nullptr;
    int64_t row = 0;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t rows = base + (t < extra ? 1 : 0);
      kTiles[rows](x + row * k_, k_, panel, k_, panel_bias, y + row * n_ + col0, n_, cols);
      row += rows;
    }
  }
#else
  (void)x;
  (void)m;
  (void)bias;
  (void)y;
  (void)first;
  (void)last;
#endif
}

}  // namespace loopserve::engine::native
