// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (8-bit, per-tensor or per-axis).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge source, which
// -Wmaybe-uninitialized reports once they are inlined (a known false positive; packed_gemv.cc).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

// Round half to even, then saturate to Q's range. NaN (0 / 0 with a zero scale) becomes Q's
// lowest value, as ONNX Runtime's x86-64 build gives (converting NaN to an integer is undefined).
template <typename Q>
Q Saturate(double v) {
  if (std::isnan(v)) return std::numeric_limits<Q>::lowest();
  v = std::nearbyint(v);
  v = std::min<double>(std::max<double>(v, std::numeric_limits<Q>::lowest()),
                       std::numeric_limits<Q>::max());
  return static_cast<Q>(v);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define LS_QUANTIZE_X86 1
#endif

// The vector loops of DynamicQuantizeLinear give the scalar loop's results bit for bit: min/max
// keep the running value when x is NaN (as std::min(lo, x) does), x / scale is rounded half to
// even, the zero point added in float, and NaN clamps to 0 (maxps returns its second operand).

// lo = min(lo, x...), hi = max(hi, x...), NaN skipped.
void MinMaxScalar(const float* in, int64_t begin, int64_t n, float* lo, float* hi) {
  for (int64_t i = begin; i < n; ++i) {
    *lo = std::min(*lo, in[i]);
    *hi = std::max(*hi, in[i]);
  }
}

// out = saturate(round(x / scale) + zero).
template <typename Q>
void Quantize8Scalar(const float* in, int64_t begin, int64_t n, float scale, Q zero, Q* out) {
  for (int64_t i = begin; i < n; ++i) {
    out[i] = Saturate<Q>(std::nearbyint(in[i] / scale) + zero);
  }
}

#if defined(LS_QUANTIZE_X86)
__attribute__((target("avx512f"))) void MinMax512(const float* in, int64_t n, float* lo,
                                                  float* hi) {
  __m512 vlo = _mm512_set1_ps(*lo), vhi = _mm512_set1_ps(*hi);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    vlo = _mm512_min_ps(x, vlo);
    vhi = _mm512_max_ps(x, vhi);
  }
  alignas(64) float l[16], h[16];
  _mm512_store_ps(l, vlo);
  _mm512_store_ps(h, vhi);
  MinMaxScalar(l, 0, 16, lo, hi);
  MinMaxScalar(h, 0, 16, lo, hi);
  MinMaxScalar(in, i, n, lo, hi);
}

__attribute__((target("avx2"))) void MinMax256(const float* in, int64_t n, float* lo, float* hi) {
  __m256 vlo = _mm256_set1_ps(*lo), vhi = _mm256_set1_ps(*hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    vlo = _mm256_min_ps(x, vlo);
    vhi = _mm256_max_ps(x, vhi);
  }
  alignas(32) float l[8], h[8];
  _mm256_store_ps(l, vlo);
  _mm256_store_ps(h, vhi);
  MinMaxScalar(l, 0, 8, lo, hi);
  MinMaxScalar(h, 0, 8, lo, hi);
  MinMaxScalar(in, i, n, lo, hi);
}

// Q is uint8_t or int8_t: the clamp to Q's range in float, then the low byte of each int32.
template <typename Q>
__attribute__((target("avx512f"))) void Quantize8_512(const float* in, int64_t n, float scale,
                                                      Q zero, Q* out) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 z = _mm512_set1_ps(zero);
  const __m512 floor = _mm512_set1_ps(std::numeric_limits<Q>::lowest());
  const __m512 ceiling = _mm512_set1_ps(std::numeric_limits<Q>::max());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(in + i), s),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(q, z), floor), ceiling);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q)));
  }
  Quantize8Scalar<Q>(in, i, n, scale, zero, out);
}

template <typename Q>
__attribute__((target("avx2"))) void Quantize8_256(const float* in, int64_t n, float scale, Q zero,
                                                   Q* out) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 z = _mm256_set1_ps(zero);
  const __m256 floor = _mm256_set1_ps(std::numeric_limits<Q>::lowest());
  const __m256 ceiling = _mm256_set1_ps(std::numeric_limits<Q>::max());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(in + i), s),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(q, z), floor), ceiling);
    const __m256i v = _mm256_cvtps_epi32(q);
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    // In range already: the saturating packs only narrow.
    const __m128i bytes = std::is_signed_v<Q>
                              ? _mm_packs_epi16(_mm_packs_epi32(lo, hi), _mm_setzero_si128())
                              : _mm_packus_epi16(_mm_packus_epi32(lo, hi), _mm_setzero_si128());
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), bytes);
  }
  Quantize8Scalar<Q>(in, i, n, scale, zero, out);
}
#endif  // LS_QUANTIZE_X86

void MinMax(Isa isa, const float* in, int64_t n, float* lo, float* hi) {
#if defined(LS_QUANTIZE_X86)
  if (isa == Isa::kAvx512) return MinMax512(in, n, lo, hi);
  if (isa == Isa::kAvx2) return MinMax256(in, n, lo, hi);
#endif
  (void)isa;
  MinMaxScalar(in, 0, n, lo, hi);
}

template <typename Q>
void Quantize8(Isa isa, const float* in, int64_t n, float scale, Q zero, Q* out) {
#if defined(LS_QUANTIZE_X86)
  if (isa == Isa::kAvx512) return Quantize8_512<Q>(in, n, scale, zero, out);
  if (isa == Isa::kAvx2) return Quantize8_256<Q>(in, n, scale, zero, out);
#endif
  (void)isa;
  Quantize8Scalar<Q>(in, 0, n, scale, zero, out);
}

// The scale / zero-point layout: one value, or one per index of `axis` (opset 13+).
struct QuantParams {
  int64_t outer = 1;  // product of dims before the axis
  int64_t n = 1;      // scale count (1 or the axis dim)
  int64_t inner = 1;  // product of dims after the axis
};

absl::StatusOr<QuantParams> Layout(const Tensor& x, const Tensor& scale, int64_t axis_attr) {
  QuantParams p;
  if (scale.NumElements() == 1 && scale.rank() <= 1) {
    p.inner = x.NumElements();
    return p;
  }
  if (scale.rank() != 1 || x.rank() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale must be a scalar or 1-D, got ", scale.shape().ToString()));
  }
  LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_attr, x.rank()));
  if (scale.dim(0) != x.dim(axis)) {
    return absl::InvalidArgumentError(absl::StrCat("scale has ", scale.dim(0), " values but axis ",
                                                   axis, " has size ", x.dim(axis)));
  }
  p.outer = x.shape().NumElements(0, axis);
  p.n = x.dim(axis);
  p.inner = x.shape().NumElements(axis + 1, x.rank());
  return p;
}

// QuantizeLinear(x, y_scale, y_zero_point?; axis): y = saturate(round(x / scale) + zero_point);
// uint8 unless the zero point says int8.
class QuantizeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 3));
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", 1));
    return std::unique_ptr<Kernel>(new QuantizeKernel(axis));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    if (x.dtype() != DataType::kFloat32 && x.dtype() != DataType::kInt32) {
      return UnsupportedType("x", x.dtype());
    }
    if (scale.dtype() != DataType::kFloat32) return UnsupportedType("y_scale", scale.dtype());
    const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    const DataType qtype = zp != nullptr ? zp->dtype() : DataType::kUint8;
    if (qtype != DataType::kUint8 && qtype != DataType::kInt8) {
      return UnsupportedType("y_zero_point", qtype);
    }
    LS_ASSIGN_OR_RETURN(QuantParams p, Layout(x, scale, axis_));
    if (zp != nullptr && zp->NumElements() != scale.NumElements()) {
      return absl::InvalidArgumentError("y_zero_point must have the shape of y_scale");
    }
    Tensor* y = ctx.output(0, qtype, x.shape());
    if (p.n == 1 && x.dtype() == DataType::kFloat32) {  // per tensor: the vector loop
      const float s = scale.data<float>()[0];
      if (qtype == DataType::kUint8) {
        Quantize8<uint8_t>(ActiveIsa(), x.data<float>(), p.inner, s,
                           zp != nullptr ? zp->data<uint8_t>()[0] : uint8_t{0},
                           y->mutable_data<uint8_t>());
      } else {
        Quantize8<int8_t>(ActiveIsa(), x.data<float>(), p.inner, s,
                          zp != nullptr ? zp->data<int8_t>()[0] : int8_t{0},
                          y->mutable_data<int8_t>());
      }
      return absl::OkStatus();
    }
    auto run = [&](auto q_tag, auto x_tag) {
      using Q = typename decltype(q_tag)::type;
      using X = typename decltype(x_tag)::type;
      const X* in = x.data<X>();
      Q* out = y->mutable_data<Q>();
      for (int64_t o = 0; o < p.outer; ++o) {
        for (int64_t c = 0; c < p.n; ++c) {
          // Divide in float32, as the reference does, so halfway cases round the same way.
          const float s = scale.data<float>()[c];
          const double z = zp != nullptr ? static_cast<double>(zp->data<Q>()[c]) : 0;
          const int64_t base = (o * p.n + c) * p.inner;
          for (int64_t i = 0; i < p.inner; ++i) {
            out[base + i] = Saturate<Q>(std::nearbyint(static_cast<float>(in[base + i]) / s) + z);
          }
        }
      }
    };
    const bool int_x = x.dtype() == DataType::kInt32;
    if (qtype == DataType::kUint8) {
      int_x ? run(TypeTag<uint8_t>{}, TypeTag<int32_t>{})
            : run(TypeTag<uint8_t>{}, TypeTag<float>{});
    } else {
      int_x ? run(TypeTag<int8_t>{}, TypeTag<int32_t>{}) : run(TypeTag<int8_t>{}, TypeTag<float>{});
    }
    return absl::OkStatus();
  }

 private:
  explicit QuantizeKernel(int64_t axis) : axis_(axis) {}
  int64_t axis_;
};

// DequantizeLinear(x, x_scale, x_zero_point?; axis): y = (x - zero_point) * scale, float32.
class DequantizeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 3));
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", 1));
    return std::unique_ptr<Kernel>(new DequantizeKernel(axis));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    if (scale.dtype() != DataType::kFloat32) return UnsupportedType("x_scale", scale.dtype());
    const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (zp != nullptr && zp->dtype() != x.dtype()) {
      return TypeMismatch("x_zero_point", zp->dtype(), "x", x.dtype());
    }
    if (zp != nullptr && zp->NumElements() != scale.NumElements()) {
      return absl::InvalidArgumentError("x_zero_point must have the shape of x_scale");
    }
    LS_ASSIGN_OR_RETURN(QuantParams p, Layout(x, scale, axis_));
    bool ok = false;
    DispatchNumeric(x.dtype(), [&](auto tag) {
      using X = typename decltype(tag)::type;
      if constexpr (std::is_same_v<X, int8_t> || std::is_same_v<X, uint8_t> ||
                    std::is_same_v<X, int32_t>) {
        ok = true;
        const X* in = x.data<X>();
        float* out = ctx.output(0, DataType::kFloat32, x.shape())->mutable_data<float>();
        for (int64_t o = 0; o < p.outer; ++o) {
          for (int64_t c = 0; c < p.n; ++c) {
            const float s = scale.data<float>()[c];
            const int64_t z = zp != nullptr ? static_cast<int64_t>(zp->data<X>()[c]) : 0;
            const int64_t base = (o * p.n + c) * p.inner;
            if constexpr (sizeof(X) == 1) {
              // Exact in int32 (|x - z| <= 255): a loop the compiler vectorizes.
              const int32_t z32 = static_cast<int32_t>(z);
              for (int64_t i = 0; i < p.inner; ++i) {
                out[base + i] = static_cast<float>(static_cast<int32_t>(in[base + i]) - z32) * s;
              }
            } else {
              for (int64_t i = 0; i < p.inner; ++i) {
                out[base + i] = static_cast<float>(static_cast<int64_t>(in[base + i]) - z) * s;
              }
            }
          }
        }
      }
    });
    if (!ok) return UnsupportedType("x", x.dtype());
    return absl::OkStatus();
  }

 private:
  explicit DequantizeKernel(int64_t axis) : axis_(axis) {}
  int64_t axis_;
};

// DynamicQuantizeLinear(x) -> (y uint8, y_scale, y_zero_point) over the range [min(0, x),
// max(0, x)] mapped to [0, 255].
class DynamicQuantizeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1, 3));
    return std::unique_ptr<Kernel>(new DynamicQuantizeKernel());
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DataType::kFloat32) return UnsupportedType("x", x.dtype());
    const float* in = x.data<float>();
    const int64_t n = x.NumElements();
    const Isa isa = ActiveIsa();
    float lo = 0;
    float hi = 0;
    MinMax(isa, in, n, &lo, &hi);
    const float scale = (hi - lo) / 255.0f;
    const uint8_t zero = scale == 0 ? 0 : Saturate<uint8_t>(-lo / scale);
    uint8_t* out = ctx.output(0, DataType::kUint8, x.shape())->mutable_data<uint8_t>();
    if (scale == 0) {
      if (n > 0) std::memset(out, zero, n);
    } else {
      Quantize8<uint8_t>(isa, in, n, scale, zero, out);
    }
    if (ctx.num_outputs() > 1)
      ctx.output(1, DataType::kFloat32, Shape{})->mutable_data<float>()[0] = scale;
    if (ctx.num_outputs() > 2)
      ctx.output(2, DataType::kUint8, Shape{})->mutable_data<uint8_t>()[0] = zero;
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterQuantizeKernels(KernelRegistry& registry) {
  registry.Register("QuantizeLinear", FactoryOf<QuantizeKernel>(), 10);
  registry.Register("DequantizeLinear", FactoryOf<DequantizeKernel>(), 10);
  registry.Register("DynamicQuantizeLinear", FactoryOf<DynamicQuantizeKernel>(), 11);
}

}  // namespace loopserve::engine::native
