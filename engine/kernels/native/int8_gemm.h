#pragma once

// 8-bit integer products Y = (A - a_zero) (B - b_zero), accumulated exactly in int32, for
// MatMulInteger and QLinearMatMul ([m, k] x [k, n]; A and B each uint8 or int8; zero points per
// tensor, per row of A, per column of B). B is packed once (at load when it is a constant) for
// the vector unit chosen at that moment:
//  - AVX-512 VNNI (kAvx512 and the CPU has AVX512_VNNI + AVX512BW): `vpdpbusd`, which multiplies
//    unsigned by signed bytes and adds groups of four into int32 lanes without saturating. B is
//    stored as int8 in 64-column panels of 4-deep k groups (one zmm = 16 columns x 4 k values).
//  - AVX2: `vpmaddwd` on 16-bit values (A widened at run time, B stored as int16 pairs in
//    24-column panels). `vpmaddubsw` would do twice the work per instruction but saturates its
//    16-bit pair sums (255 * 127 * 2 > 32767), so its results would not be exact.
//  - scalar otherwise (and on non-x86 builds).
// Both operands are moved to the one signedness the instructions take (A unsigned, B signed):
// an int8 A is offset by +128 (and its zero point with it), a uint8 B by -128; the differences
// A - a_zero and B - b_zero do not change. The zero points then enter through the row sums of A
// (computed per call) and the column sums of B (computed at packing):
//   sum_p (A'_ip - za'_i)(B'_pj - zb'_j) = (A' B')_ij - zb'_j rowsum_i + za'_i (k zb'_j -
//   colsum_j),
// applied to each register tile before it is stored. Sums wrap modulo 2^32 as the int32 result
// of the reference loop does.
//
// Immutable after construction except Repack; Run may be called from many threads at once with a
// scratch each.

#include <cstdint>
#include <vector>

namespace loopserve::engine {
class Tensor;
}  // namespace loopserve::engine

namespace loopserve::engine::native {

// A zero point as the kernels receive it: one value or `count` values (per row of A or per column
// of B), uint8 or int8; null data means zero.
struct Int8ZeroPoint {
  const void* data = nullptr;
  bool is_signed = false;
  int64_t count = 0;
  int32_t At(int64_t i) const {
    if (data == nullptr) return 0;
    const int64_t j = count == 1 ? 0 : i;
    return is_signed ? static_cast<const int8_t*>(data)[j] : static_cast<const uint8_t*>(data)[j];
  }
};

// The zero point tensor `zp` (uint8 or int8; null for none) as the kernels receive it: its
// element count is how many values it holds (1 for one per tensor).
Int8ZeroPoint ZeroPointOf(const Tensor* zp);

// Per-caller buffers of Int8Gemm::Run (reused across calls: no allocation once they are large
// enough). Not thread-safe; one per frame.
struct Int8GemmScratch {
  std::vector<uint8_t> a;         // A moved to uint8 (or int16 for AVX2), rows padded
  std::vector<int32_t> row_sum;   // per row of A'
  std::vector<int32_t> row_zero;  // za' per row
  std::vector<int32_t> col_zero;  // zb' per column, padded to whole panels with zeros
  std::vector<int32_t> col_term;  // k zb' - colsum per column, padded the same way
  // What `a` holds (PrepareA): A' for this path, depth and row count.
  int a_path = -1;
  int64_t a_k = -1;
  int64_t a_rows = -1;
};

class Int8Gemm {
 public:
  enum class Path : uint8_t { kScalar, kAvx2, kAvx512Vnni };

  // The path ActiveIsa() and the CPU allow now.
  static Path BestPath();
  static const char* PathName(Path path);

  // An empty product; Repack fills it.
  Int8Gemm() = default;
  // Packs B, the [k, n] row-major uint8 (or int8 when `b_signed`) matrix at `b`, for BestPath().
  // Copied: the buffer need not outlive this. Requires k >= 0, n >= 0.
  Int8Gemm(const void* b, bool b_signed, int64_t k, int64_t n) { Repack(b, b_signed, k, n); }

  // Packs another B into this object's storage (reusing it when large enough): the non-constant
  // B of a product, packed per call.
  void Repack(const void* b, bool b_signed, int64_t k, int64_t n);

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  bool b_signed() const { return b_signed_; }
  Path path() const { return path_; }

  // y[m, n] = (A - a_zero)(B - b_zero) for A the [m, k] row-major uint8 (or int8 when
  // `a_signed`) matrix at `a`; a_zero has 1 or m values, b_zero 1 or n values (the caller checks
  // the counts). `y` must not alias `a`.
  void Run(const void* a, bool a_signed, int64_t m, const Int8ZeroPoint& a_zero,
           const Int8ZeroPoint& b_zero, int32_t* y, Int8GemmScratch& scratch) const;

  // Run in two steps, for one A times many B (a convolution's weights times its im2col, packed a
  // block of positions at a time): PrepareA moves A into `scratch` for this object's path and k;
  // RunPrepared multiplies it by the B packed now (Repack may run in between, with the same path
  // and k: Prepared says whether `scratch` still fits) into y[m, n] with row stride `ldy` >= n.
  void PrepareA(const void* a, bool a_signed, int64_t m, const Int8ZeroPoint& a_zero,
                Int8GemmScratch& scratch) const;
  bool Prepared(const Int8GemmScratch& scratch, int64_t m) const {
    return scratch.a_path == static_cast<int>(path_) && scratch.a_k == k_ && scratch.a_rows == m;
  }
  void RunPrepared(int64_t m, const Int8ZeroPoint& b_zero, int32_t* y, int64_t ldy,
                   Int8GemmScratch& scratch) const;

 private:
  Path path_ = Path::kScalar;
  bool b_signed_ = false;
  int64_t k_ = 0;
  int64_t n_ = 0;
  std::vector<int8_t> packed_;    // the panels (bytes; int16 pairs on the AVX2 path)
  int64_t offset_ = 0;            // where they start in packed_ (a 64-byte boundary)
  std::vector<int32_t> col_sum_;  // sum over k of B' per column
};

}  // namespace loopserve::engine::native
