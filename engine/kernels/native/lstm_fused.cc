#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 min/max intrinsics pass _mm512_undefined_ps() as the unused merge source,
// which -W(maybe-)uninitialized reports once they are inlined (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "engine/kernels/native/lstm_fused.h"

#include <algorithm>
#include <cstring>

#include "engine/kernels/backend.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/packed_gemv.h"
#include "engine/kernels/native/rational_tanh.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LS_LSTM_FUSED_X86 1
#endif

namespace loopserve::engine::native {
namespace {

constexpr int64_t kBlock = LstmFusedStep::kBlock;
constexpr int64_t kBlockFloats = 4 * kBlock;  // one k of a block: i f c o x 16 lanes

#if defined(LS_LSTM_FUSED_X86)

using rational_tanh::Sigmoid256;
using rational_tanh::Sigmoid512;
using rational_tanh::Tanh256;
using rational_tanh::Tanh512;

// The rows of one tile: pointers into h_prev, c, h_next and the projections.
struct TileRows {
  const float* h_prev[6];
  float* c[6];
  float* h_next[6];
  const float* projected[6];
};

constexpr int kMaxRows512 = 6;
constexpr int kMaxRows256 = 2;

// The gate math of 16 lanes of one row, from the four accumulated products.
__attribute__((target("avx512f,fma"))) inline void Epilogue512(
    const LstmFusedStep::Args& a, int64_t h, int64_t j0, __mmask16 mask, __m512 gi, __m512 gf,
    __m512 gc, __m512 go, const float* projected, float* c_row, float* h_row) {
  gi = _mm512_add_ps(gi, _mm512_maskz_loadu_ps(mask, projected + j0));
  gf = _mm512_add_ps(gf, _mm512_maskz_loadu_ps(mask, projected + h + j0));
  gc = _mm512_add_ps(gc, _mm512_maskz_loadu_ps(mask, projected + 2 * h + j0));
  go = _mm512_add_ps(go, _mm512_maskz_loadu_ps(mask, projected + 3 * h + j0));
  const __m512 c = _mm512_maskz_loadu_ps(mask, c_row + j0);
  if (a.peephole != nullptr) {
    gi = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a.peephole + j0), c, gi);
    gf = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a.peephole + h + j0), c, gf);
  }
  const __m512 lo = _mm512_set1_ps(-a.clip), hi = _mm512_set1_ps(a.clip);
  if (a.clip > 0) {
    gi = _mm512_min_ps(hi, _mm512_max_ps(lo, gi));
    gf = _mm512_min_ps(hi, _mm512_max_ps(lo, gf));
    gc = _mm512_min_ps(hi, _mm512_max_ps(lo, gc));
  }
  const __m512 i = Sigmoid512(gi);
  const __m512 f = a.input_forget ? _mm512_sub_ps(_mm512_set1_ps(1.0f), i) : Sigmoid512(gf);
  const __m512 g = Tanh512(gc);
  const __m512 c_next = _mm512_fmadd_ps(f, c, _mm512_mul_ps(i, g));
  if (a.peephole != nullptr) {
    go = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a.peephole + 2 * h + j0), c_next, go);
  }
  if (a.clip > 0) go = _mm512_min_ps(hi, _mm512_max_ps(lo, go));
  const __m512 o = Sigmoid512(go);
  _mm512_mask_storeu_ps(c_row + j0, mask, c_next);
  _mm512_mask_storeu_ps(h_row + j0, mask, _mm512_mul_ps(o, Tanh512(c_next)));
}

template <int kRows>
__attribute__((target("avx512f,fma"))) void Tile512(const LstmFusedStep::Args& a, const float* w,
                                                    int64_t h, int64_t j0, const TileRows& rows) {
  __m512 acc[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int g = 0; g < 4; ++g) acc[r][g] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < h; ++k, w += kBlockFloats) {
    const __m512 w0 = _mm512_load_ps(w);
    const __m512 w1 = _mm512_load_ps(w + kBlock);
    const __m512 w2 = _mm512_load_ps(w + 2 * kBlock);
    const __m512 w3 = _mm512_load_ps(w + 3 * kBlock);
    for (int r = 0; r < kRows; ++r) {
      const __m512 x = _mm512_set1_ps(rows.h_prev[r][k]);
      acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(x, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(x, w3, acc[r][3]);
    }
  }
  const int64_t left = h - j0;
  const __mmask16 mask =
      left >= kBlock ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
  for (int r = 0; r < kRows; ++r) {
    Epilogue512(a, h, j0, mask, acc[r][0], acc[r][1], acc[r][2], acc[r][3], rows.projected[r],
                rows.c[r], rows.h_next[r]);
  }
}

__attribute__((target("avx2,fma"))) inline void Epilogue256(const LstmFusedStep::Args& a, int64_t h,
                                                            int64_t j0, __m256i mask, __m256 gi,
                                                            __m256 gf, __m256 gc, __m256 go,
                                                            const float* projected, float* c_row,
                                                            float* h_row) {
  gi = _mm256_add_ps(gi, _mm256_maskload_ps(projected + j0, mask));
  gf = _mm256_add_ps(gf, _mm256_maskload_ps(projected + h + j0, mask));
  gc = _mm256_add_ps(gc, _mm256_maskload_ps(projected + 2 * h + j0, mask));
  go = _mm256_add_ps(go, _mm256_maskload_ps(projected + 3 * h + j0, mask));
  const __m256 c = _mm256_maskload_ps(c_row + j0, mask);
  if (a.peephole != nullptr) {
    gi = _mm256_fmadd_ps(_mm256_maskload_ps(a.peephole + j0, mask), c, gi);
    gf = _mm256_fmadd_ps(_mm256_maskload_ps(a.peephole + h + j0, mask), c, gf);
  }
  const __m256 lo = _mm256_set1_ps(-a.clip), hi = _mm256_set1_ps(a.clip);
  if (a.clip > 0) {
    gi = _mm256_min_ps(hi, _mm256_max_ps(lo, gi));
    gf = _mm256_min_ps(hi, _mm256_max_ps(lo, gf));
    gc = _mm256_min_ps(hi, _mm256_max_ps(lo, gc));
  }
  const __m256 i = Sigmoid256(gi);
  const __m256 f = a.input_forget ? _mm256_sub_ps(_mm256_set1_ps(1.0f), i) : Sigmoid256(gf);
  const __m256 g = Tanh256(gc);
  const __m256 c_next = _mm256_fmadd_ps(f, c, _mm256_mul_ps(i, g));
  if (a.peephole != nullptr) {
    go = _mm256_fmadd_ps(_mm256_maskload_ps(a.peephole + 2 * h + j0, mask), c_next, go);
  }
  if (a.clip > 0) go = _mm256_min_ps(hi, _mm256_max_ps(lo, go));
  const __m256 o = Sigmoid256(go);
  _mm256_maskstore_ps(c_row + j0, mask, c_next);
  _mm256_maskstore_ps(h_row + j0, mask, _mm256_mul_ps(o, Tanh256(c_next)));
}

// Eight lanes (one half of a block) of up to two rows.
template <int kRows>
__attribute__((target("avx2,fma"))) void Tile256(const LstmFusedStep::Args& a, const float* w,
                                                 int64_t h, int64_t j0, const TileRows& rows) {
  const int left = static_cast<int>(std::min<int64_t>(h - j0, 8));
  if (left <= 0) return;
  __m256 acc[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int g = 0; g < 4; ++g) acc[r][g] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < h; ++k, w += kBlockFloats) {
    const __m256 w0 = _mm256_load_ps(w);
    const __m256 w1 = _mm256_load_ps(w + kBlock);
    const __m256 w2 = _mm256_load_ps(w + 2 * kBlock);
    const __m256 w3 = _mm256_load_ps(w + 3 * kBlock);
    for (int r = 0; r < kRows; ++r) {
      const __m256 x = _mm256_broadcast_ss(rows.h_prev[r] + k);
      acc[r][0] = _mm256_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, w1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(x, w2, acc[r][2]);
      acc[r][3] = _mm256_fmadd_ps(x, w3, acc[r][3]);
    }
  }
  const __m256i mask =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int r = 0; r < kRows; ++r) {
    Epilogue256(a, h, j0, mask, acc[r][0], acc[r][1], acc[r][2], acc[r][3], rows.projected[r],
                rows.c[r], rows.h_next[r]);
  }
}

// All 16 lanes of one row: 8 accumulators, so each weight cache line is read once (the two-row
// tile reads a block's lines twice, one half per pass, which doubles the traffic of a batch-1
// step bound by reading R).
__attribute__((target("avx2,fma"))) void Row256(const LstmFusedStep::Args& a, const float* w,
                                                int64_t h, int64_t j0, const TileRows& rows) {
  __m256 acc[2][4];
  for (int half = 0; half < 2; ++half) {
    for (int g = 0; g < 4; ++g) acc[half][g] = _mm256_setzero_ps();
  }
  const float* x = rows.h_prev[0];
  for (int64_t k = 0; k < h; ++k, w += kBlockFloats) {
    const __m256 xk = _mm256_broadcast_ss(x + k);
    for (int half = 0; half < 2; ++half) {
      for (int g = 0; g < 4; ++g) {
        acc[half][g] = _mm256_fmadd_ps(xk, _mm256_load_ps(w + g * kBlock + 8 * half), acc[half][g]);
      }
    }
  }
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int half = 0; half < 2; ++half) {
    const int64_t start = j0 + 8 * half;
    const int left = static_cast<int>(std::min<int64_t>(h - start, 8));
    if (left <= 0) break;
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lanes);
    Epilogue256(a, h, start, mask, acc[half][0], acc[half][1], acc[half][2], acc[half][3],
                rows.projected[0], rows.c[0], rows.h_next[0]);
  }
}

void RunTile512(int n, const LstmFusedStep::Args& a, const float* w, int64_t h, int64_t j0,
                const TileRows& rows) {
  switch (n) {
    case 1:
      return Tile512<1>(a, w, h, j0, rows);
    case 2:
      return Tile512<2>(a, w, h, j0, rows);
    case 3:
      return Tile512<3>(a, w, h, j0, rows);
    case 4:
      return Tile512<4>(a, w, h, j0, rows);
    case 5:
      return Tile512<5>(a, w, h, j0, rows);
    default:
      return Tile512<6>(a, w, h, j0, rows);
  }
}

void RunTile256(int n, const LstmFusedStep::Args& a, const float* w, int64_t h, int64_t j0,
                const TileRows& rows) {
  if (n == 1) return Row256(a, w, h, j0, rows);
  for (int half = 0; half < 2; ++half) Tile256<2>(a, w + 8 * half, h, j0 + 8 * half, rows);
}

#endif  // LS_LSTM_FUSED_X86

}  // namespace

bool LstmFusedStep::Available() { return ActiveBackend().lstm_fused && PackedGemv::Available(); }

LstmFusedStep::LstmFusedStep(const float* r, int64_t hidden)
    : h_(hidden), blocks_((hidden + kBlock - 1) / kBlock) {
  packed_.Resize(DataType::kFloat32, Shape{blocks_, h_, 4, kBlock});
  float* dst = packed_.mutable_data<float>();
  std::memset(dst, 0, packed_.ByteSize());
  for (int64_t j = 0; j < blocks_; ++j) {
    const int64_t width = std::min(kBlock, h_ - j * kBlock);
    for (int64_t k = 0; k < h_; ++k) {
      float* out = dst + (j * h_ + k) * kBlockFloats;
      for (int g = 0; g < 4; ++g) {
        for (int64_t l = 0; l < width; ++l) {
          out[g * kBlock + l] = r[(g * h_ + j * kBlock + l) * h_ + k];
        }
      }
    }
  }
}

void LstmFusedStep::Run(const Args& a, int64_t block_begin, int64_t block_end) const {
#if defined(LS_LSTM_FUSED_X86)
  const bool avx512 = ActiveIsa() == Isa::kAvx512;
  const int max_rows = avx512 ? kMaxRows512 : kMaxRows256;
  const float* packed = packed_.data<float>();
  const int64_t h = h_;
  for (int64_t s = 0; s < block_end - block_begin; ++s) {
    const int64_t j = a.descending ? block_end - 1 - s : block_begin + s;
    const float* w = packed + j * h * kBlockFloats;
    TileRows rows;
    int n = 0;
    auto flush = [&] {
      if (avx512) {
        RunTile512(n, a, w, h, j * kBlock, rows);
      } else {
        RunTile256(n, a, w, h, j * kBlock, rows);
      }
      n = 0;
    };
    for (int64_t b = 0; b < a.batch; ++b) {
      if (a.active != nullptr && !a.active[b]) continue;
      rows.h_prev[n] = a.h_prev + b * h;
      rows.c[n] = a.c + b * h;
      rows.h_next[n] = a.h_next + b * h;
      rows.projected[n] = a.projected[b];
      if (++n == max_rows) flush();
    }
    if (n > 0) flush();
  }
#else
  (void)a;
  (void)block_begin;
  (void)block_end;
#endif
}

}  // namespace loopserve::engine::native
