#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 min/max intrinsics pass _mm512_undefined_ps() as the unused merge source,
// which -W(maybe-)uninitialized reports once they are inlined (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "engine/kernels/native/packed_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/kernels/backend.h"
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
constexpr int kVectors = PackedGemm::kPanelAvx2 / 8;

std::atomic<bool> g_enabled{true};

// Whether the AVX-512 path prefetches the next panel while it computes one (see Tile512).
constexpr bool kPrefetchNextPanel = true;

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

// The AVX-512 tiles: up to 8 rows x 3 zmm vectors (48 columns) = 24 accumulators, 3 registers for
// the panel's row of 48 weights and 1 for the broadcast x value (32 zmm registers). The grid's row
// counts (8 .. 64) split into whole 8-row tiles; 11 loads per 24 FMAs.
constexpr int kMaxTileRows512 = 8;
constexpr int64_t kDepthBlock = 128;
constexpr int kVectors512 = PackedGemm::kPanelAvx512 / 16;

#define LS_GEMM512_ROW_DECL(r) \
  __m512 acc##r##0 = _mm512_setzero_ps(), acc##r##1 = acc##r##0, acc##r##2 = acc##r##0
#define LS_GEMM512_ROW_FMA(r)                                           \
  if constexpr (R > r) {                                                \
    const __m512 x = _mm512_set1_ps(a[r * lda + p]);                    \
    acc##r##0 = _mm512_fmadd_ps(x, b0, acc##r##0);                      \
    if constexpr (V > 1) acc##r##1 = _mm512_fmadd_ps(x, b1, acc##r##1); \
    if constexpr (V > 2) acc##r##2 = _mm512_fmadd_ps(x, b2, acc##r##2); \
  }
#define LS_GEMM512_ROW_STORE(r)                                                                \
  if constexpr (R > r) {                                                                       \
    if (last_block) {                                                                          \
      StoreRow512<V>(acc##r##0, acc##r##1, acc##r##2, e,                                       \
                     e.addend != nullptr ? e.addend + (row0 + r) * ldc + col0 : nullptr,       \
                     e.bias != nullptr ? e.bias + col0 : nullptr, c + (row0 + r) * ldc + col0, \
                     cols);                                                                    \
    } else {                                                                                   \
      float* out = c + (row0 + r) * ldc + col0;                                                \
      _mm512_mask_storeu_ps(out, masks[0], acc##r##0);                                         \
      if constexpr (V > 1) _mm512_mask_storeu_ps(out + 16, masks[1], acc##r##1);               \
      if constexpr (V > 2) _mm512_mask_storeu_ps(out + 32, masks[2], acc##r##2);               \
    }                                                                                          \
  }
// The partial sums of an earlier depth block, stored by it in c.
#define LS_GEMM512_ROW_LOAD(r)                                                 \
  if constexpr (R > r) {                                                       \
    const float* in = c + (row0 + r) * ldc + col0;                             \
    acc##r##0 = _mm512_maskz_loadu_ps(masks[0], in);                           \
    if constexpr (V > 1) acc##r##1 = _mm512_maskz_loadu_ps(masks[1], in + 16); \
    if constexpr (V > 2) acc##r##2 = _mm512_maskz_loadu_ps(masks[2], in + 32); \
  }

__attribute__((target("avx512f,fma"))) inline __m512 Activate512(
    __m512 v, PackedGemv::Activation activation) {
  switch (activation) {
    case PackedGemv::Activation::kNone:
      return v;
    case PackedGemv::Activation::kTanh:
      return rational_tanh::Tanh512(v);
    case PackedGemv::Activation::kRelu:
      return _mm512_max_ps(v, _mm512_setzero_ps());
    case PackedGemv::Activation::kSigmoid:
      return rational_tanh::Sigmoid512(v);
  }
  return v;
}

// StoreRow's AVX-512 twin: 16 * (V - 1) < cols <= 16 * V; masked lanes neither read nor written.
template <int V>
__attribute__((target("avx512f,fma"))) inline void StoreRow512(__m512 v0, __m512 v1, __m512 v2,
                                                               const PackedGemm::Epilogue& e,
                                                               const float* addend,
                                                               const float* bias, float* c,
                                                               int64_t cols) {
  __m512 v[3] = {v0, v1, v2};
  const float* first = e.bias_first ? bias : addend;
  const float* second = e.bias_first ? addend : bias;
  const __m512 first_scale = _mm512_set1_ps(e.bias_first ? e.bias_scale : 1.0f);
  const __m512 second_scale = _mm512_set1_ps(e.bias_first ? 1.0f : e.bias_scale);
  for (int j = 0; j < V; ++j) {
    const int64_t left = cols - 16 * j;
    const __mmask16 mask =
        left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
    if (first != nullptr) {
      v[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, first + 16 * j), first_scale, v[j]);
    }
    if (second != nullptr) {
      v[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, second + 16 * j), second_scale, v[j]);
    }
    _mm512_mask_storeu_ps(c + 16 * j, mask, Activate512(v[j], e.activation));
  }
}

// Tile's AVX-512 twin (b: one packed panel's rows of one depth block, k rows of 16 * V floats).
// A product deeper than one block runs block by block: `first_block` false starts from the partial
// sums in c, `last_block` false stores the sums there without the epilogue (the same additions in
// the same order as one pass: bitwise the same result). With `prefetch`, the same bytes of the
// next panel are brought towards L2 as this panel is read (the first row tile of a panel does
// it): weights past L2 stream from L3 while the FMAs run.
template <int R, int V>
__attribute__((target("avx512f,fma"))) void Tile512(const float* a, int64_t lda, const float* b,
                                                    int64_t k, const PackedGemm::Epilogue& e,
                                                    float* c, int64_t ldc, int64_t row0,
                                                    int64_t col0, int64_t cols,
                                                    const float* prefetch, bool first_block,
                                                    bool last_block) {
  __mmask16 masks[3];
  for (int j = 0; j < 3; ++j) {
    const int64_t left = cols - 16 * j;
    masks[j] = left >= 16 ? static_cast<__mmask16>(0xFFFF)
                          : static_cast<__mmask16>((1u << std::max<int64_t>(left, 0)) - 1);
  }
  LS_GEMM512_ROW_DECL(0);
  LS_GEMM512_ROW_DECL(1);
  LS_GEMM512_ROW_DECL(2);
  LS_GEMM512_ROW_DECL(3);
  LS_GEMM512_ROW_DECL(4);
  LS_GEMM512_ROW_DECL(5);
  LS_GEMM512_ROW_DECL(6);
  LS_GEMM512_ROW_DECL(7);
  if (!first_block) {
    LS_GEMM512_ROW_LOAD(0)
    LS_GEMM512_ROW_LOAD(1)
    LS_GEMM512_ROW_LOAD(2)
    LS_GEMM512_ROW_LOAD(3)
    LS_GEMM512_ROW_LOAD(4)
    LS_GEMM512_ROW_LOAD(5)
    LS_GEMM512_ROW_LOAD(6)
    LS_GEMM512_ROW_LOAD(7)
  }
  for (int64_t p = 0; p < k; ++p, b += 16 * V) {
    if (prefetch != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch + p * 16 * V), _MM_HINT_T1);
      if constexpr (V > 1) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + p * 16 * V + 16), _MM_HINT_T1);
      }
      if constexpr (V > 2) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + p * 16 * V + 32), _MM_HINT_T1);
      }
    }
    const __m512 b0 = _mm512_loadu_ps(b);
    __m512 b1 = b0;
    __m512 b2 = b0;
    if constexpr (V > 1) b1 = _mm512_loadu_ps(b + 16);
    if constexpr (V > 2) b2 = _mm512_loadu_ps(b + 32);
    LS_GEMM512_ROW_FMA(0)
    LS_GEMM512_ROW_FMA(1)
    LS_GEMM512_ROW_FMA(2)
    LS_GEMM512_ROW_FMA(3)
    LS_GEMM512_ROW_FMA(4)
    LS_GEMM512_ROW_FMA(5)
    LS_GEMM512_ROW_FMA(6)
    LS_GEMM512_ROW_FMA(7)
  }
  LS_GEMM512_ROW_STORE(0);
  LS_GEMM512_ROW_STORE(1);
  LS_GEMM512_ROW_STORE(2);
  LS_GEMM512_ROW_STORE(3);
  LS_GEMM512_ROW_STORE(4);
  LS_GEMM512_ROW_STORE(5);
  LS_GEMM512_ROW_STORE(6);
  LS_GEMM512_ROW_STORE(7);
}

#undef LS_GEMM512_ROW_DECL
#undef LS_GEMM512_ROW_FMA
#undef LS_GEMM512_ROW_STORE
#undef LS_GEMM512_ROW_LOAD

using Tile512Fn = void (*)(const float*, int64_t, const float*, int64_t,
                           const PackedGemm::Epilogue&, float*, int64_t, int64_t, int64_t, int64_t,
                           const float*, bool, bool);
#define LS_GEMM512_ROW_TILES(r) \
  { nullptr, Tile512<r, 1>, Tile512<r, 2>, Tile512<r, 3> }
// kTiles512[rows][vectors]
constexpr Tile512Fn kTiles512[kMaxTileRows512 + 1][kVectors512 + 1] = {
    {nullptr, nullptr, nullptr, nullptr},
    LS_GEMM512_ROW_TILES(1),
    LS_GEMM512_ROW_TILES(2),
    LS_GEMM512_ROW_TILES(3),
    LS_GEMM512_ROW_TILES(4),
    LS_GEMM512_ROW_TILES(5),
    LS_GEMM512_ROW_TILES(6),
    LS_GEMM512_ROW_TILES(7),
    LS_GEMM512_ROW_TILES(8)};
#undef LS_GEMM512_ROW_TILES

#endif  // LS_PACKED_GEMM_X86

}  // namespace

bool PackedGemm::Available() {
  return ActiveBackend().packed_gemm_max_rows > 0 && g_enabled.load(std::memory_order_relaxed);
}

bool PackedGemm::Preferred(int64_t rows) {
  if (!Available()) return false;
  return rows <= ActiveBackend().packed_gemm_max_rows;
}

void PackedGemm::SetEnabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }

PackedGemm::PackedGemm(const float* weights, int64_t k, int64_t n, bool transposed, float alpha)
    : k_(k),
      n_(n),
      avx512_(ActiveIsa() == Isa::kAvx512),
      panel_(avx512_ ? kPanelAvx512 : kPanelAvx2) {
  // Every panel but the last is panel_ columns; the last as many whole vectors as its columns
  // need.
  const int64_t vector = avx512_ ? 16 : 8;
  const int64_t last_width = (n_ - (panels() - 1) * panel_ + vector - 1) / vector * vector;
  packed_.Resize(DataType::kFloat32, Shape{(panels() - 1) * panel_ * k_ + last_width * k_});
  float* dst = packed_.mutable_data<float>();
  std::memset(dst, 0, packed_.ByteSize());
  for (int64_t p = 0; p < panels(); ++p) {
    const int64_t col0 = p * panel_;
    const int64_t stride = p + 1 < panels() ? panel_ : last_width;
    float* panel = dst + col0 * k_;
    for (int64_t i = 0; i < k_; ++i) {
      for (int64_t j = 0; j < std::min(panel_, n_ - col0); ++j) {
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
  if (avx512_) {
    RunPanels512(x, m, epilogue, y, first, last);
    return;
  }
  // Rows spread evenly over the fewest tiles of at most kMaxTileRows (6 rows: 3 + 3, not 4 + 2:
  // a 2-row tile has too few accumulators to hide the FMA latency).
  const int64_t tiles = (m + kMaxTileRows - 1) / kMaxTileRows;
  const int64_t base = m / tiles;
  const int64_t extra = m % tiles;
  const float* packed = packed_.data<float>();
  for (int64_t p = first; p < last; ++p) {
    const int64_t col0 = p * panel_;
    const int64_t cols = std::min(panel_, n_ - col0);
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

void PackedGemm::RunPanels512(const float* x, int64_t m, const Epilogue& epilogue, float* y,
                              int64_t first, int64_t last) const {
#if defined(LS_PACKED_GEMM_X86)
  // Rows spread evenly over the fewest tiles of at most kMaxTileRows512.
  const int64_t tiles = (m + kMaxTileRows512 - 1) / kMaxTileRows512;
  const int64_t base = m / tiles;
  const int64_t extra = m % tiles;
  const float* packed = packed_.data<float>();
  // With more than one row tile, the panel runs in depth blocks small enough to stay in L1 while
  // every row tile reads them (kDepthBlock rows of 48 floats: 24 KB of the 48 KB L1); not when the
  // addend is the output (the partial sums would overwrite it).
  const int64_t depth = tiles > 1 && epilogue.addend != y ? std::min<int64_t>(kDepthBlock, k_) : k_;
  for (int64_t p = first; p < last; ++p) {
    const int64_t col0 = p * panel_;
    const int64_t cols = std::min(panel_, n_ - col0);
    const int64_t vectors = (cols + 15) / 16;
    const float* panel = packed + col0 * k_;
    // The next panel of this range, fetched while this one runs (a prefetch never faults: past
    // a narrower last panel's end it fetches nothing useful and nothing wrong).
    const float* next = kPrefetchNextPanel && p + 1 < last ? panel + panel_ * k_ : nullptr;
    const int64_t width = vectors * 16;  // this panel's stride
    for (int64_t k0 = 0; k0 < k_; k0 += depth) {
      const int64_t kc = std::min(depth, k_ - k0);
      int64_t row = 0;
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t rows = base + (t < extra ? 1 : 0);
        kTiles512[rows][vectors](
            x + row * k_ + k0, k_, panel + k0 * width, kc, epilogue, y, n_, row, col0, cols,
            t == 0 && next != nullptr ? next + k0 * panel_ : nullptr, k0 == 0, k0 + kc == k_);
        row += rows;
      }
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
