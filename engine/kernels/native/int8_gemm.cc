#include "engine/kernels/native/int8_gemm.h"

#include <algorithm>
#include <cstring>

#include "engine/kernels/backend.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/tensor/tensor.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LS_INT8_GEMM_X86 1
#endif

namespace loopserve::engine::native {
namespace {

// The packed geometry of a path: columns per panel, columns per vector, k values per 4-byte group
// of a column (4 int8 for vpdpbusd, 2 int16 for vpmaddwd). Every panel but the last is kPanel
// columns; the last as many whole vectors as its columns need, the columns past n zero.
struct Geometry {
  int64_t panel;
  int64_t vector;
  int64_t depth;
};

constexpr Geometry kVnni = {64, 16, 4};
constexpr Geometry kAvx2 = {24, 8, 2};

Geometry GeometryOf(Int8Gemm::Path path) { return path == Int8Gemm::Path::kAvx2 ? kAvx2 : kVnni; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int32_t Load32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// What every tile of one Run shares: A' (rows padded to whole groups) with its row stride in
// elements, the per-row and per-column corrections, and y.
struct TileArgs {
  const void* a;
  int64_t lda;
  const int32_t* row_sum;
  const int32_t* row_zero;
  const int32_t* col_zero;
  const int32_t* col_term;
  int32_t* y;
  int64_t ldy;
  int64_t groups;
};

#if defined(LS_INT8_GEMM_X86)

// Named accumulators, not an array: GCC keeps an array of vectors in memory across the k loop
// (see packed_gemm.cc). Row r's accumulators are acc<r><v> for vectors v < V.
#define LS_I8_DECL(zero, r)                                                             \
  [[maybe_unused]] auto acc##r##0 = zero, acc##r##1 = acc##r##0, acc##r##2 = acc##r##0, \
                        acc##r##3 = acc##r##0

#define LS_VNNI_DOT(r)                                                      \
  if constexpr (R > r) {                                                    \
    const __m512i x = _mm512_set1_epi32(Load32(a + r * t.lda + 4 * g));     \
    acc##r##0 = _mm512_dpbusd_epi32(acc##r##0, x, b0);                      \
    if constexpr (V > 1) acc##r##1 = _mm512_dpbusd_epi32(acc##r##1, x, b1); \
    if constexpr (V > 2) acc##r##2 = _mm512_dpbusd_epi32(acc##r##2, x, b2); \
    if constexpr (V > 3) acc##r##3 = _mm512_dpbusd_epi32(acc##r##3, x, b3); \
  }
#define LS_VNNI_STORE(r) \
  if constexpr (R > r)   \
  StoreRow512<V>(acc##r##0, acc##r##1, acc##r##2, acc##r##3, t, row0 + r, col0, cols)

// y[row, col0 : col0 + cols] = acc - zb' rowsum + za' (k zb' - colsum), 16 * (V - 1) < cols <= 16V.
template <int V>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void StoreRow512(
    __m512i v0, __m512i v1, __m512i v2, __m512i v3, const TileArgs& t, int64_t row, int64_t col0,
    int64_t cols) {
  const __m512i v[4] = {v0, v1, v2, v3};
  const __m512i neg_sum = _mm512_set1_epi32(-t.row_sum[row]);
  const __m512i za = _mm512_set1_epi32(t.row_zero[row]);
  int32_t* y = t.y + row * t.ldy + col0;
  for (int j = 0; j < V; ++j) {
    const __m512i zb = _mm512_loadu_si512(t.col_zero + col0 + 16 * j);
    const __m512i term = _mm512_loadu_si512(t.col_term + col0 + 16 * j);
    const __m512i r = _mm512_add_epi32(
        v[j], _mm512_add_epi32(_mm512_mullo_epi32(neg_sum, zb), _mm512_mullo_epi32(za, term)));
    const int64_t left = cols - 16 * j;
    const __mmask16 mask =
        left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
    _mm512_mask_storeu_epi32(y + 16 * j, mask, r);
  }
}

// Rows [row0, row0 + R) and columns [col0, col0 + cols) of y: `panel` one packed panel of
// `width` columns (groups x width x 4 bytes).
template <int R, int V>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void TileVnni(const TileArgs& t,
                                                                     const int8_t* panel,
                                                                     int64_t width, int64_t row0,
                                                                     int64_t col0, int64_t cols) {
  const uint8_t* a = static_cast<const uint8_t*>(t.a) + row0 * t.lda;
  const __m512i zero = _mm512_setzero_si512();
  LS_I8_DECL(zero, 0);
  LS_I8_DECL(zero, 1);
  LS_I8_DECL(zero, 2);
  LS_I8_DECL(zero, 3);
  LS_I8_DECL(zero, 4);
  LS_I8_DECL(zero, 5);
  const int64_t step = width * 4;
  for (int64_t g = 0; g < t.groups; ++g, panel += step) {
    const __m512i b0 = _mm512_loadu_si512(panel);
    __m512i b1 = b0, b2 = b0, b3 = b0;
    if constexpr (V > 1) b1 = _mm512_loadu_si512(panel + 64);
    if constexpr (V > 2) b2 = _mm512_loadu_si512(panel + 128);
    if constexpr (V > 3) b3 = _mm512_loadu_si512(panel + 192);
    LS_VNNI_DOT(0)
    LS_VNNI_DOT(1)
    LS_VNNI_DOT(2)
    LS_VNNI_DOT(3)
    LS_VNNI_DOT(4)
    LS_VNNI_DOT(5)
  }
  LS_VNNI_STORE(0);
  LS_VNNI_STORE(1);
  LS_VNNI_STORE(2);
  LS_VNNI_STORE(3);
  LS_VNNI_STORE(4);
  LS_VNNI_STORE(5);
}

#define LS_AVX2_DOT(r)                                                                      \
  if constexpr (R > r) {                                                                    \
    const __m256i x = _mm256_set1_epi32(Load32(a + r * t.lda + 2 * g));                     \
    acc##r##0 = _mm256_add_epi32(acc##r##0, _mm256_madd_epi16(x, b0));                      \
    if constexpr (V > 1) acc##r##1 = _mm256_add_epi32(acc##r##1, _mm256_madd_epi16(x, b1)); \
    if constexpr (V > 2) acc##r##2 = _mm256_add_epi32(acc##r##2, _mm256_madd_epi16(x, b2)); \
  }
#define LS_AVX2_STORE(r) \
  if constexpr (R > r) StoreRow256<V>(acc##r##0, acc##r##1, acc##r##2, t, row0 + r, col0, cols)

template <int V>
__attribute__((target("avx2"))) inline void StoreRow256(__m256i v0, __m256i v1, __m256i v2,
                                                        const TileArgs& t, int64_t row,
                                                        int64_t col0, int64_t cols) {
  const __m256i v[3] = {v0, v1, v2};
  const __m256i neg_sum = _mm256_set1_epi32(-t.row_sum[row]);
  const __m256i za = _mm256_set1_epi32(t.row_zero[row]);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int32_t* y = t.y + row * t.ldy + col0;
  for (int j = 0; j < V; ++j) {
    const __m256i zb =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.col_zero + col0 + 8 * j));
    const __m256i term =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.col_term + col0 + 8 * j));
    const __m256i r = _mm256_add_epi32(
        v[j], _mm256_add_epi32(_mm256_mullo_epi32(neg_sum, zb), _mm256_mullo_epi32(za, term)));
    const int64_t left = std::min<int64_t>(cols - 8 * j, 8);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lanes);
    _mm256_maskstore_epi32(y + 8 * j, mask, r);
  }
}

template <int R, int V>
__attribute__((target("avx2"))) void TileAvx2(const TileArgs& t, const int8_t* panel, int64_t width,
                                              int64_t row0, int64_t col0, int64_t cols) {
  const int16_t* a = static_cast<const int16_t*>(t.a) + row0 * t.lda;
  const __m256i zero = _mm256_setzero_si256();
  LS_I8_DECL(zero, 0);
  LS_I8_DECL(zero, 1);
  LS_I8_DECL(zero, 2);
  LS_I8_DECL(zero, 3);
  const int64_t step = width * 4;
  for (int64_t g = 0; g < t.groups; ++g, panel += step) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel));
    __m256i b1 = b0, b2 = b0;
    if constexpr (V > 1) b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 32));
    if constexpr (V > 2) b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 64));
    LS_AVX2_DOT(0)
    LS_AVX2_DOT(1)
    LS_AVX2_DOT(2)
    LS_AVX2_DOT(3)
  }
  LS_AVX2_STORE(0);
  LS_AVX2_STORE(1);
  LS_AVX2_STORE(2);
  LS_AVX2_STORE(3);
}

#undef LS_I8_DECL
#undef LS_VNNI_DOT
#undef LS_VNNI_STORE
#undef LS_AVX2_DOT
#undef LS_AVX2_STORE

using TileFn = void (*)(const TileArgs&, const int8_t*, int64_t, int64_t, int64_t, int64_t);

// Rows per tile: 6 x 4 zmm accumulators + 4 panel vectors + 1 broadcast of 32 zmm registers;
// 4 x 3 ymm + 3 + 1 of 16 ymm registers.
constexpr int kVnniRows = 6;
constexpr int kAvx2Rows = 4;

// kVnniTiles[rows][vectors]
constexpr TileFn kVnniTiles[kVnniRows + 1][5] = {
    {nullptr, nullptr, nullptr, nullptr, nullptr},
    {nullptr, TileVnni<1, 1>, TileVnni<1, 2>, TileVnni<1, 3>, TileVnni<1, 4>},
    {nullptr, TileVnni<2, 1>, TileVnni<2, 2>, TileVnni<2, 3>, TileVnni<2, 4>},
    {nullptr, TileVnni<3, 1>, TileVnni<3, 2>, TileVnni<3, 3>, TileVnni<3, 4>},
    {nullptr, TileVnni<4, 1>, TileVnni<4, 2>, TileVnni<4, 3>, TileVnni<4, 4>},
    {nullptr, TileVnni<5, 1>, TileVnni<5, 2>, TileVnni<5, 3>, TileVnni<5, 4>},
    {nullptr, TileVnni<6, 1>, TileVnni<6, 2>, TileVnni<6, 3>, TileVnni<6, 4>}};
constexpr TileFn kAvx2Tiles[kAvx2Rows + 1][4] = {
    {nullptr, nullptr, nullptr, nullptr},
    {nullptr, TileAvx2<1, 1>, TileAvx2<1, 2>, TileAvx2<1, 3>},
    {nullptr, TileAvx2<2, 1>, TileAvx2<2, 2>, TileAvx2<2, 3>},
    {nullptr, TileAvx2<3, 1>, TileAvx2<3, 2>, TileAvx2<3, 3>},
    {nullptr, TileAvx2<4, 1>, TileAvx2<4, 2>, TileAvx2<4, 3>}};

// Rows [p, p + 4) of B' (`row` at row p, `n` bytes apart) for the 64 columns of one panel, as
// the panel's group p / 4 at `cell`: each column's 4 bytes together, 16 columns per vector. Two
// rounds of unpacks interleave within 128-bit lanes; a 4 x 4 transpose of the lanes puts columns
// 16j..16j+15 into vector j.
// _mm512_shuffle_i64x2 with every lane written (GCC 12's unmasked form reads an undefined vector,
// which -Werror=uninitialized refuses).
template <int kImm>
__attribute__((target("avx512f"))) inline __m512i Lanes(__m512i a, __m512i b) {
  return _mm512_mask_shuffle_i64x2(a, static_cast<__mmask8>(0xFF), a, b, kImm);
}

__attribute__((target("avx512f,avx512bw"))) void PackGroup64(const uint8_t* row, int64_t n,
                                                             uint8_t flip, int8_t* cell) {
  const __m512i bits = _mm512_set1_epi8(static_cast<char>(flip));
  const __m512i r0 = _mm512_xor_si512(_mm512_loadu_si512(row), bits);
  const __m512i r1 = _mm512_xor_si512(_mm512_loadu_si512(row + n), bits);
  const __m512i r2 = _mm512_xor_si512(_mm512_loadu_si512(row + 2 * n), bits);
  const __m512i r3 = _mm512_xor_si512(_mm512_loadu_si512(row + 3 * n), bits);
  const __m512i lo01 = _mm512_unpacklo_epi8(r0, r1), hi01 = _mm512_unpackhi_epi8(r0, r1);
  const __m512i lo23 = _mm512_unpacklo_epi8(r2, r3), hi23 = _mm512_unpackhi_epi8(r2, r3);
  // v<q> lane L: columns 16L + 4q .. 16L + 4q + 3.
  const __m512i v0 = _mm512_unpacklo_epi16(lo01, lo23), v1 = _mm512_unpackhi_epi16(lo01, lo23);
  const __m512i v2 = _mm512_unpacklo_epi16(hi01, hi23), v3 = _mm512_unpackhi_epi16(hi01, hi23);
  const __m512i t0 = Lanes<0x44>(v0, v1), t1 = Lanes<0xEE>(v0, v1);
  const __m512i t2 = Lanes<0x44>(v2, v3), t3 = Lanes<0xEE>(v2, v3);
  _mm512_storeu_si512(cell, Lanes<0x88>(t0, t2));
  _mm512_storeu_si512(cell + 64, Lanes<0xDD>(t0, t2));
  _mm512_storeu_si512(cell + 128, Lanes<0x88>(t1, t3));
  _mm512_storeu_si512(cell + 192, Lanes<0xDD>(t1, t3));
}

// The column sums of packed VNNI panels (zeros past k and n add nothing): one `vpdpbusd` of ones
// per vector and group sums a column's 4 bytes into its lane.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void ColumnSumsVnni(const int8_t* packed,
                                                                           int64_t groups,
                                                                           int64_t n,
                                                                           int32_t* sums) {
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t col0 = 0; col0 < n; col0 += kVnni.panel) {
    const int64_t cols = std::min(kVnni.panel, n - col0);
    const int64_t vectors = CeilDiv(cols, kVnni.vector);
    const int64_t width = vectors * kVnni.vector;  // the last panel's; kPanel before it
    const int8_t* panel = packed + col0 * groups * 4;
    for (int64_t v = 0; v < vectors; ++v) {
      __m512i acc = _mm512_setzero_si512();
      const int8_t* at = panel + 64 * v;
      for (int64_t g = 0; g < groups; ++g, at += width * 4) {
        acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512(at));
      }
      const int64_t left = cols - 16 * v;
      const __mmask16 mask =
          left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
      _mm512_mask_storeu_epi32(sums + col0 + 16 * v, mask, acc);
    }
  }
}

bool CpuHasVnni() { return DetectedCpuFeatures().avx512_vnni; }

// Packs the whole groups of 4 rows of B's columns [col0, col0 + cols) (B: k x n bytes, each
// xor `flip`) into the VNNI panel `dst`, `width` columns wide: 16 columns at a time, bytes
// interleaved by two rounds of unpacks. Returns the rows packed (k rounded down to 4).
int64_t PackVnniGroups(const uint8_t* src, int64_t k, int64_t n, int64_t col0, int64_t cols,
                       int64_t width, uint8_t flip, int8_t* dst) {
  const __m128i flip_bits = _mm_set1_epi8(static_cast<char>(flip));
  int64_t p = 0;
  for (; p + 4 <= k; p += 4) {
    const uint8_t* row = src + p * n + col0;
    int8_t* cell = dst + (p / 4) * width * 4;
    int64_t j = 0;
    if (cols == kVnni.panel) {
      PackGroup64(row, n, flip, cell);
      continue;
    }
    for (; j + 16 <= cols; j += 16) {
      auto load = [&](int64_t r) {
        return _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + r * n + j)),
                             flip_bits);
      };
      const __m128i r0 = load(0), r1 = load(1), r2 = load(2), r3 = load(3);
      const __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
      const __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
      __m128i* out = reinterpret_cast<__m128i*>(cell + 4 * j);
      _mm_storeu_si128(out, _mm_unpacklo_epi16(lo01, lo23));
      _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(lo01, lo23));
      _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(hi01, hi23));
      _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(hi01, hi23));
    }
    for (; j < cols; ++j) {
      for (int64_t d = 0; d < 4; ++d) cell[4 * j + d] = static_cast<int8_t>(row[d * n + j] ^ flip);
    }
  }
  return p;
}

#endif  // LS_INT8_GEMM_X86

}  // namespace

Int8ZeroPoint ZeroPointOf(const Tensor* zp) {
  Int8ZeroPoint z;
  if (zp != nullptr) {
    z.data = zp->raw_data();
    z.is_signed = zp->dtype() == DataType::kInt8;
    z.count = zp->NumElements();
  }
  return z;
}

Int8Gemm::Path Int8Gemm::BestPath() {
#if defined(LS_INT8_GEMM_X86)
  const Isa isa = ActiveIsa();
  if (isa == Isa::kAvx512 && CpuHasVnni()) return Path::kAvx512Vnni;
  if (isa >= Isa::kAvx2) return Path::kAvx2;
#endif
  return Path::kScalar;
}

const char* Int8Gemm::PathName(Path path) {
  switch (path) {
    case Path::kAvx512Vnni:
      return "avx512_vnni";
    case Path::kAvx2:
      return "avx2";
    case Path::kScalar:
      return "scalar";
  }
  return "scalar";
}

void Int8Gemm::Repack(const void* b, bool b_signed, int64_t k, int64_t n) {
  path_ = BestPath();
  b_signed_ = b_signed;
  k_ = k;
  n_ = n;
  // B' = B as int8: a uint8 B offset by -128 is the xor of its top bit. Rows are read whole and
  // written with a constant stride (no per-element branch): the non-constant B of a product and
  // the im2col of a convolution are packed on every run.
  const uint8_t* src = static_cast<const uint8_t*>(b);
  const uint8_t flip = b_signed ? 0 : 0x80;
  col_sum_.assign(n, 0);
  if (path_ != Path::kAvx512Vnni) {  // the VNNI path sums its packed panels instead
    for (int64_t p = 0; p < k; ++p) {
      const uint8_t* row = src + p * n;
      for (int64_t j = 0; j < n; ++j) col_sum_[j] += static_cast<int8_t>(row[j] ^ flip);
    }
  }
  if (path_ == Path::kScalar) {
    packed_.resize(k * n);
    offset_ = 0;
    for (int64_t i = 0; i < k * n; ++i) packed_[i] = static_cast<int8_t>(src[i] ^ flip);
    return;
  }
  const Geometry geo = GeometryOf(path_);
  const int64_t groups = CeilDiv(k, geo.depth);
  const int64_t panels = CeilDiv(n, geo.panel);
  if (panels == 0) {
    packed_.clear();
    return;
  }
  const int64_t last_width = CeilDiv(n - (panels - 1) * geo.panel, geo.vector) * geo.vector;
  // 64 bytes more, for the panels to start on a cache line (every vector load then stays within
  // one line: a panel row is a whole number of vectors).
  const int64_t bytes = ((panels - 1) * geo.panel + last_width) * groups * 4;
  packed_.resize(bytes + 64);
  offset_ = (64 - reinterpret_cast<uintptr_t>(packed_.data()) % 64) % 64;
  for (int64_t panel = 0; panel < panels; ++panel) {
    const int64_t col0 = panel * geo.panel;
    const int64_t width = panel + 1 < panels ? geo.panel : last_width;
    const int64_t cols = std::min(geo.panel, n - col0);
    int8_t* dst = packed_.data() + offset_ + col0 * groups * 4;
    // Zeros where no element of B goes (storage reused: not cleared as a whole): a last panel
    // narrower than its vectors, the rows past k in the last group.
    if (cols < width) {
      std::memset(dst, 0, groups * width * 4);
    } else if (k % geo.depth != 0) {
      std::memset(dst + (groups - 1) * width * 4, 0, width * 4);
    }
    int64_t p = 0;
#if defined(LS_INT8_GEMM_X86)
    if (path_ == Path::kAvx512Vnni) p = PackVnniGroups(src, k, n, col0, cols, width, flip, dst);
#endif
    for (; p < k; ++p) {
      const int64_t g = p / geo.depth, d = p % geo.depth;
      const uint8_t* row = src + p * n + col0;
      int8_t* cell = dst + g * width * 4;
      if (path_ == Path::kAvx2) {
        for (int64_t j = 0; j < cols; ++j) {
          const int16_t v = static_cast<int8_t>(row[j] ^ flip);
          std::memcpy(cell + 4 * j + 2 * d, &v, sizeof(v));
        }
      } else {
        for (int64_t j = 0; j < cols; ++j) cell[4 * j + d] = static_cast<int8_t>(row[j] ^ flip);
      }
    }
  }
#if defined(LS_INT8_GEMM_X86)
  if (path_ == Path::kAvx512Vnni)
    ColumnSumsVnni(packed_.data() + offset_, groups, n, col_sum_.data());
#endif
}

void Int8Gemm::Run(const void* a, bool a_signed, int64_t m, const Int8ZeroPoint& a_zero,
                   const Int8ZeroPoint& b_zero, int32_t* y, Int8GemmScratch& scratch) const {
  if (m <= 0 || n_ <= 0) return;
  PrepareA(a, a_signed, m, a_zero, scratch);
  RunPrepared(m, b_zero, y, n_, scratch);
}

void Int8Gemm::PrepareA(const void* a, bool a_signed, int64_t m, const Int8ZeroPoint& a_zero,
                        Int8GemmScratch& scratch) const {
  const int64_t k = k_;
  // A' = A as uint8 (an int8 A offset by +128: the xor of its top bit), rows padded to whole
  // groups (zeros, against B's zero rows); int16 on AVX2.
  const int32_t a_offset = a_signed ? 128 : 0;
  const uint8_t flip = a_signed ? 0x80 : 0;
  const uint8_t* a8 = static_cast<const uint8_t*>(a);
  scratch.row_zero.resize(m);
  for (int64_t i = 0; i < m; ++i) scratch.row_zero[i] = a_zero.At(i) + a_offset;
  const int64_t depth = path_ == Path::kScalar ? 1 : GeometryOf(path_).depth;
  const int64_t lda = CeilDiv(k, depth) * depth;
  const size_t element_size = path_ == Path::kAvx2 ? 2 : 1;
  scratch.a.assign(m * lda * element_size, 0);
  scratch.row_sum.resize(m);
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* src = a8 + i * k;
    int32_t sum = 0;
    if (path_ == Path::kAvx2) {
      int16_t* dst = reinterpret_cast<int16_t*>(scratch.a.data()) + i * lda;
      for (int64_t p = 0; p < k; ++p) {
        const uint8_t v = src[p] ^ flip;
        dst[p] = v;
        sum += v;
      }
    } else {
      uint8_t* dst = scratch.a.data() + i * lda;
      for (int64_t p = 0; p < k; ++p) {
        const uint8_t v = src[p] ^ flip;
        dst[p] = v;
        sum += v;
      }
    }
    scratch.row_sum[i] = sum;
  }
  scratch.a_path = static_cast<int>(path_);
  scratch.a_k = k;
  scratch.a_rows = m;
}

void Int8Gemm::RunPrepared(int64_t m, const Int8ZeroPoint& b_zero, int32_t* y, int64_t ldy,
                           Int8GemmScratch& scratch) const {
  if (m <= 0 || n_ <= 0) return;
  const int64_t k = k_;
  const int32_t b_offset = b_signed_ ? 0 : -128;
  if (path_ == Path::kScalar) {
    const uint8_t* a8 = scratch.a.data();
    for (int64_t i = 0; i < m; ++i) {
      const int32_t za = scratch.row_zero[i];
      for (int64_t j = 0; j < n_; ++j) {
        const int32_t zb = b_zero.At(j) + b_offset;
        uint32_t acc = 0;  // wraps as the int32 sum of the reference does on two's complement
        for (int64_t p = 0; p < k; ++p) {
          acc += static_cast<uint32_t>((static_cast<int32_t>(a8[i * k + p]) - za) *
                                       (static_cast<int32_t>(packed_[p * n_ + j]) - zb));
        }
        y[i * ldy + j] = static_cast<int32_t>(acc);
      }
    }
    return;
  }

#if defined(LS_INT8_GEMM_X86)
  const Geometry geo = GeometryOf(path_);
  const int64_t groups = CeilDiv(k, geo.depth);
  const int64_t panels = CeilDiv(n_, geo.panel);
  const int64_t padded_n = panels * geo.panel;
  scratch.col_zero.assign(padded_n, 0);
  scratch.col_term.assign(padded_n, 0);
  for (int64_t j = 0; j < n_; ++j) {
    const int32_t zb = b_zero.At(j) + b_offset;
    scratch.col_zero[j] = zb;
    scratch.col_term[j] = static_cast<int32_t>(
        static_cast<uint32_t>(k) * static_cast<uint32_t>(zb) - static_cast<uint32_t>(col_sum_[j]));
  }
  const int64_t lda = groups * geo.depth;
  TileArgs t;
  t.a = scratch.a.data();
  t.lda = lda;
  t.row_sum = scratch.row_sum.data();
  t.row_zero = scratch.row_zero.data();
  t.col_zero = scratch.col_zero.data();
  t.col_term = scratch.col_term.data();
  t.y = y;
  t.ldy = ldy;
  t.groups = groups;
  // Rows spread evenly over the fewest tiles of at most max_rows.
  const int max_rows = path_ == Path::kAvx2 ? kAvx2Rows : kVnniRows;
  const int64_t tiles = CeilDiv(m, max_rows);
  const int64_t base = m / tiles;
  const int64_t extra = m % tiles;
  for (int64_t panel = 0; panel < panels; ++panel) {
    const int64_t col0 = panel * geo.panel;
    const int64_t cols = std::min(geo.panel, n_ - col0);
    const int64_t vectors = CeilDiv(cols, geo.vector);
    const int64_t width = panel + 1 < panels ? geo.panel : vectors * geo.vector;
    const int8_t* packed = packed_.data() + offset_ + col0 * groups * 4;
    int64_t row = 0;
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t rows = base + (tile < extra ? 1 : 0);
      const TileFn fn =
          path_ == Path::kAvx2 ? kAvx2Tiles[rows][vectors] : kVnniTiles[rows][vectors];
      fn(t, packed, width, row, col0, cols);
      row += rows;
    }
  }
#endif
}

}  // namespace loopserve::engine::native
