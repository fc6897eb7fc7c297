#include "engine/kernels/native/packed_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/rational_tanh.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LS_PACKED_GEMM_X86 1
#endif

namespace loopserve::engine::native {
namespace {

// Rows per register tile: 4 rows x 3 vectors = 12 accumulators, 3 registers for the panel's row
// of 24 weights and 1 for the broadcast x value (16 ymm registers). Measured against 6 x 16 (the
// other tile that fits): 7 loads per 12 FMAs instead of 8, and the grid's row counts (8 .. 64)
// split into whole tiles: 93-98% of the FMA peak on its shapes against 91-97% (bench/RESULTS.md).
constexpr int kMaxTileRows = 4;
constexpr int kVectors = PackedGemm::kPanel / 8;

std::atomic<bool> g_enabled{true};

#if defined(LS_PACKED_GEMM_X86)

// Vector v (of V) of row r of a tile: its accumulator, updated by the broadcast x value when the
// tile has at least r + 1 rows and v + 1 vectors. Named registers, not an array: GCC keeps an
// array of __m256 in memory across the k loop (a store per FMA: 40% of the peak, not 90%).
#define LS_GEMM_ROW_DECL(r) \
  __m256 acc##r##0 = _mm256_setzero_ps(), acc##r##1 = acc##r##0, acc##r##2 = acc##r##0
#define LS_GEMM_ROW_FMA(r)                                              \
  if constexpr (R > r) {                                                \
    const __m256 x = _mm256_broadcast_ss(a + r * lda + p);              \
    acc##r##0 = _mm256_fmadd_ps(x, b0, acc##r##0);                      \
    if constexpr (V > 1) acc##r##1 = _mm256_fmadd_ps(x, b1, acc##r##1); \
    if constexpr (V > 2) acc##r##2 = _mm256_fmadd_ps(x, b2, acc##r##2); \
  }
#define LS_GEMM_ROW_STORE(r)                                                      \
  if constexpr (R > r)                                                            \
  StoreRow<V>(acc##r##0, acc##r##1, acc##r##2, e,                                 \
              e.addend != nullptr ? e.addend + (row0 + r) * ldc + col0 : nullptr, \
              e.bias != nullptr ? e.bias + col0 : nullptr, c + (row0 + r) * ldc + col0, cols)

__attribute__((target("avx2,fma"))) inline __m256 Activate(__m256 v,
                                                           PackedGemv::Activation activation) {
  switch (activation) {
    case PackedGemv::Activation::kNone:
      return v;
    case PackedGemv::Activation::kTanh:
      return rational_tanh::Tanh256(v);
    case PackedGemv::Activation::kRelu:
      return _mm256_max_ps(v, _mm256_setzero_ps());
    case PackedGemv::Activation::kSigmoid:
      return rational_tanh::Sigmoid256(v);
  }
  return v;
}

// c[0:cols] = act((v0, v1, v2)[0:V] + addend[0:cols] + bias[0:cols]) for the first cols lanes
// (addend and bias may be null), 8 * (V - 1) < cols <= 8 * V.
template <int V>
__attribute__((target("avx2,fma"))) inline void StoreRow(__m256 v0, __m256 v1, __m256 v2,
                                                         const PackedGemm::Epilogue& e,
                                                         const float* addend, const float* bias,
                                                         float* c, int64_t cols) {
  __m256 v[3] = {v0, v1, v2};
  // The operands in the order of the Adds they replace (float addition is not associative); the
  // bias times its scale in one rounding (exactly v + bias for the scale 1).
  const float* first = e.bias_first ? bias : addend;
  const float* second = e.bias_first ? addend : bias;
  const __m256 first_scale = _mm256_set1_ps(e.bias_first ? e.bias_scale : 1.0f);
  const __m256 second_scale = _mm256_set1_ps(e.bias_first ? 1.0f : e.bias_scale);
  for (int j = 0; j < V - 1; ++j) {
    if (first != nullptr) v[j] = _mm256_fmadd_ps(_mm256_loadu_ps(first + 8 * j), first_scale, v[j]);
    if (second != nullptr) {
      v[j] = _mm256_fmadd_ps(_mm256_loadu_ps(second + 8 * j), second_scale, v[j]);
    }
    _mm256_storeu_ps(c + 8 * j, Activate(v[j], e.activation));
  }
  constexpr int last = V - 1;
  __m256i mask = _mm256_set1_epi32(-1);
  if (cols != 8 * V) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols) - 8 * last), lanes);
  }
  // A lane whose mask is off is neither read (no fault past the end of a row) nor written.
  if (first != nullptr) {
    v[last] = _mm256_fmadd_ps(_mm256_maskload_ps(first + 8 * last, mask), first_scale, v[last]);
  }
  if (second != nullptr) {
    v[last] = _mm256_fmadd_ps(_mm256_maskload_ps(second + 8 * last, mask), second_scale, v[last]);
  }
  _mm256_maskstore_ps(c + 8 * last, mask, Activate(v[last], e.activation));
}

// Rows [row0, row0 + R) and columns [col0, col0 + cols) of c = e(a b): a row-major with row
// stride lda (these rows at `a`), b one packed panel (k rows of 8 * V floats), c and e.addend
// row-major with row stride ldc, e.bias indexed by column; 8 * (V - 1) < cols <= 8 * V.
template <int R, int V>
__attribute__((target("avx2,fma"))) void Tile(const float* a, int64_t lda, const float* b,
                                              int64_t k, const PackedGemm::Epilogue& e, float* c,
                                              int64_t ldc, int64_t row0, int64_t col0,
                                              int64_t cols) {
  LS_GEMM_ROW_DECL(0);
  LS_GEMM_ROW_DECL(1);
  LS_GEMM_ROW_DECL(2);
  LS_GEMM_ROW_DECL(3);
  for (int64_t p = 0; p < k; ++p, b += 8 * V) {
    const __m256 b0 = _mm256_loadu_ps(b);
    __m256 b1 = b0;
    __m256 b2 = b0;
    if constexpr (V > 1) b1 = _mm256_loadu_ps(b + 8);
    if constexpr (V > 2) b2 = _mm256_loadu_ps(b + 16);
    LS_GEMM_ROW_FMA(0)
    LS_GEMM_ROW_FMA(1)
    LS_GEMM_ROW_FMA(2)
    LS_GEMM_ROW_FMA(3)
  }
  LS_GEMM_ROW_STORE(0);
  LS_GEMM_ROW_STORE(1);
  LS_GEMM_ROW_STORE(2);
  LS_GEMM_ROW_STORE(3);
}

#undef LS_GEMM_ROW_DECL
#undef LS_GEMM_ROW_FMA
#undef LS_GEMM_ROW_STORE

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, const PackedGemm::Epilogue&,
                        float*, int64_t, int64_t, int64_t, int64_t);
// kTiles[rows][vectors]
constexpr TileFn kTiles[kMaxTileRows + 1][kVectors + 1] = {
    {nullptr, nullptr, nullptr, nullptr},
    {nullptr, Tile<1, 1>, Tile<1, 2>, Tile<1, 3>},
    {nullptr, Tile<2, 1>, Tile<2, 2>, Tile<2, 3>},
    {nullptr, Tile<3, 1>, Tile<3, 2>, Tile<3, 3>},
    {nullptr, Tile<4, 1>, Tile<4, 2>, Tile<4, 3>}};

#endif  // LS_PACKED_GEMM_X86

}  // namespace

bool PackedGemm::Available() {
  return ActiveIsa() == Isa::kAvx2 && g_enabled.load(std::memory_order_relaxed);
}

void PackedGemm::SetEnabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }

PackedGemm::PackedGemm(const float* weights, int64_t k, int64_t n, bool transposed, float alpha)
    : k_(k), n_(n) {
  // Every panel but the last is kPanel columns; the last as many whole vectors as its columns need.
  const int64_t last_width = (n_ - (panels() - 1) * kPanel + 7) / 8 * 8;
  packed_.Resize(DataType::kFloat32, Shape{(panels() - 1) * kPanel * k_ + last_width * k_});
  float* dst = packed_.mutable_data<float>();
  std::memset(dst, 0, packed_.ByteSize());
  for (int64_t p = 0; p < panels(); ++p) {
    const int64_t col0 = p * kPanel;
    const int64_t stride = p + 1 < panels() ? kPanel : last_width;
    float* panel = dst + col0 * k_;
    for (int64_t i = 0; i < k_; ++i) {
      for (int64_t j = 0; j < std::min(kPanel, n_ - col0); ++j) {
        const int64_t col = col0 + j;
        panel[i * stride + j] =
            alpha * (transposed ? weights[col * k_ + i] : weights[i * n_ + col]);
      }
    }
  }
}

void PackedGemm::RunPanels(const float* x, int64_t m, const Epilogue& epilogue, float* y,
                           int64_t first, int64_t last) const {
#if defined(LS_PACKED_GEMM_X86)
  if (m <= 0) return;
  // Rows spread evenly over the fewest tiles of at most kMaxTileRows (6 rows: 3 + 3, not 4 + 2:
  // a 2-row tile has too few accumulators to hide the FMA latency).
  const int64_t tiles = (m + kMaxTileRows - 1) / kMaxTileRows;
  const int64_t base = m / tiles;
  const int64_t extra = m % tiles;
  const float* packed = packed_.data<float>();
  for (int64_t p = first; p < last; ++p) {
    const int64_t col0 = p * kPanel;
    const int64_t cols = std::min(kPanel, n_ - col0);
    const int64_t vectors = (cols + 7) / 8;
    const float* panel = packed + col0 * k_;
    int64_t row = 0;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t rows = base + (t < extra ? 1 : 0);
      kTiles[rows][vectors](x + row * k_, k_, panel, k_, epilogue, y, n_, row, col0, cols);
      row += rows;
    }
  }
#else
  (void)x;
  (void)m;
  (void)epilogue;
  (void)y;
  (void)first;
  (void)last;
#endif
}

}  // namespace loopserve::engine::native
