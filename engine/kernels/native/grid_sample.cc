// GridSample (opset 16): samples X [N, C, H, W] at the normalised locations of grid
// [N, H_out, W_out, 2] (x then y in [-1, 1]) with bilinear, nearest or bicubic interpolation and
// zeros, border or reflection padding, as torch.nn.functional.grid_sample (which the spec
// points to) computes it. Each batch's grid is turned once into taps (per output location, 1, 4
// or 16 pixel offsets with their weights; a tap outside the image has offset -1 and samples
// nothing), then every channel applies them: float32 with AVX2 gathers, the rest scalar.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

enum class Mode : uint8_t { kBilinear, kNearest, kBicubic };
enum class Padding : uint8_t { kZeros, kBorder, kReflection };

// A location of an axis of `size` pixels, from [-1, 1] to pixel units.
double Unnormalize(double g, int64_t size, bool align_corners) {
  return align_corners ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2;
}

// Reflects `v` into [twice_low / 2, twice_high / 2] (bounds given doubled, as they may be
// half-pixels).
double Reflect(double v, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return 0;
  const double low = twice_low / 2.0;
  const double span = (twice_high - twice_low) / 2.0;
  v = std::fabs(v - low);
  const double extra = std::fmod(v, span);
  const int64_t flips = static_cast<int64_t>(std::floor(v / span));
  return flips % 2 == 0 ? extra + low : span - extra + low;
}

// Applies the border or reflection rule to a pixel coordinate (zeros: unchanged).
double Pad(double v, int64_t size, Padding padding, bool align_corners) {
  if (padding == Padding::kBorder) return std::min(std::max(v, 0.0), static_cast<double>(size - 1));
  if (padding == Padding::kReflection) {
    v = align_corners ? Reflect(v, 0, 2 * (size - 1)) : Reflect(v, -1, 2 * size - 1);
    return std::min(std::max(v, 0.0), static_cast<double>(size - 1));
  }
  return v;
}

// A pixel index from a coordinate; far-off (or NaN) coordinates become an index outside every image
// instead of an out-of-range conversion.
int64_t Index(double v) {
  constexpr double kFar = 1e15;
  return v >= -kFar && v <= kFar ? static_cast<int64_t>(v) : -2;
}

// The cubic convolution weights (A = -0.75) of the 4 taps around a fraction t.
void CubicWeights(double t, double w[4]) {
  constexpr double a = -0.75;
  auto near = [](double x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };
  auto far = [](double x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

// One batch's taps: offsets[k * points + p] and weights[k * points + p] for tap k of location p.
class GridSampleState : public KernelState {
 public:
  std::vector<int32_t> offsets;
  std::vector<float> weights_f;
  std::vector<double> weights_d;
  std::vector<float>& weights(float*) { return weights_f; }
  std::vector<double>& weights(double*) { return weights_d; }
};

// out[p] = sum over taps k of weights[k][p] * image[offsets[k][p]] (offset -1: nothing).
template <typename T>
void ApplyTapsScalar(const T* image, const int32_t* offsets, const T* weights, int taps,
                     int64_t begin, int64_t points, T* out) {
  for (int64_t p = begin; p < points; ++p) {
    T acc = 0;
    for (int k = 0; k < taps; ++k) {
      const int32_t at = offsets[k * points + p];
      if (at >= 0) acc += weights[k * points + p] * image[at];
    }
    out[p] = acc;
  }
}

// 8 locations at a time. AVX-512 machines take it too: 16-wide masked gathers measured 12% slower
// on Sapphire Rapids (1x32x64x64 on a 64x64 grid: 190 vs 170 us).
__attribute__((target("avx2,fma"))) void ApplyTaps256(const float* image, const int32_t* offsets,
                                                      const float* weights, int taps,
                                                      int64_t points, float* out) {
  const __m256i none = _mm256_set1_epi32(-1);
  int64_t p = 0;
  for (; p + 8 <= points; p += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < taps; ++k) {
      const __m256i at =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets + k * points + p));
      const __m256 inside = _mm256_castsi256_ps(_mm256_cmpgt_epi32(at, none));
      const __m256 v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), image, at, inside, 4);
      acc = _mm256_fmadd_ps(v, _mm256_loadu_ps(weights + k * points + p), acc);
    }
    _mm256_storeu_ps(out + p, acc);
  }
  ApplyTapsScalar(image, offsets, weights, taps, p, points, out);
}

class GridSampleKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    const Node& node = init.node();
    LS_ASSIGN_OR_RETURN(const std::string mode, node.GetString("mode", "bilinear"));
    LS_ASSIGN_OR_RETURN(const std::string padding, node.GetString("padding_mode", "zeros"));
    LS_ASSIGN_OR_RETURN(const int64_t align, node.GetInt("align_corners", 0));
    auto kernel = std::unique_ptr<GridSampleKernel>(new GridSampleKernel());
    if (mode == "bilinear") {
      kernel->mode_ = Mode::kBilinear;
    } else if (mode == "nearest") {
      kernel->mode_ = Mode::kNearest;
    } else if (mode == "bicubic") {
      kernel->mode_ = Mode::kBicubic;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("mode '", mode, "' is not bilinear, nearest or bicubic"));
    }
    if (padding == "zeros") {
      kernel->padding_ = Padding::kZeros;
    } else if (padding == "border") {
      kernel->padding_ = Padding::kBorder;
    } else if (padding == "reflection") {
      kernel->padding_ = Padding::kReflection;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("padding_mode '", padding, "' is not zeros, border or reflection"));
    }
    kernel->align_corners_ = align != 0;
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<GridSampleState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& grid = ctx.input(1);
    if (x.rank() != 4 || grid.rank() != 4 || grid.dim(0) != x.dim(0) || grid.dim(3) != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("X ", x.shape().ToString(), " and grid ", grid.shape().ToString(),
                       " must be [N, C, H, W] and [N, H_out, W_out, 2]"));
    }
    if (grid.dtype() != x.dtype()) return TypeMismatch("grid", grid.dtype(), "X", x.dtype());
    const Shape out_shape{x.dim(0), x.dim(1), grid.dim(1), grid.dim(2)};
    if (!IsFloatingPoint(x.dtype())) return UnsupportedType("X", x.dtype());
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        if (x.dim(2) * x.dim(3) <= std::numeric_limits<int32_t>::max()) {
          SampleByTaps<T>(x, grid, *ctx.state<GridSampleState>(), *y);
        } else {
          Sample<T>(x, grid, *y);
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  GridSampleKernel() = default;

  // Writes the taps of one location (pixel coordinates gx, gy): 1 (nearest), 4 (bilinear) or 16
  // (bicubic) offsets and weights at offsets[k * points] and weights[k * points].
  template <typename T>
  void LocationTaps(double gx, double gy, int64_t h, int64_t w, int64_t points, int32_t* offsets,
                    T* weights) const {
    auto put = [&](int k, int64_t r, int64_t c, double weight) {
      const bool inside = r >= 0 && r < h && c >= 0 && c < w;
      offsets[k * points] = inside ? static_cast<int32_t>(r * w + c) : -1;
      weights[k * points] = static_cast<T>(weight);
    };
    if (mode_ == Mode::kBicubic) {
      // Taps around the unpadded location; padding applies to each tap's coordinate.
      const double fx = std::floor(gx), fy = std::floor(gy);
      double wx[4], wy[4];
      CubicWeights(gx - fx, wx);
      CubicWeights(gy - fy, wy);
      for (int j = 0; j < 4; ++j) {
        const int64_t r = Index(Pad(fy - 1 + j, h, padding_, align_corners_));
        for (int i = 0; i < 4; ++i) {
          put(j * 4 + i, r, Index(Pad(fx - 1 + i, w, padding_, align_corners_)), wy[j] * wx[i]);
        }
      }
      return;
    }
    const double sx = Pad(gx, w, padding_, align_corners_);
    const double sy = Pad(gy, h, padding_, align_corners_);
    if (mode_ == Mode::kNearest) {
      // Round half to even, as nearbyint in the default rounding mode.
      put(0, Index(std::nearbyint(sy)), Index(std::nearbyint(sx)), 1.0);
      return;
    }
    const double x0 = std::floor(sx), y0 = std::floor(sy);
    const double tx = sx - x0, ty = sy - y0;
    const int64_t c0 = Index(x0), r0 = Index(y0);
    put(0, r0, c0, (1 - ty) * (1 - tx));
    put(1, r0, c0 + 1, (1 - ty) * tx);
    put(2, r0 + 1, c0, ty * (1 - tx));
    put(3, r0 + 1, c0 + 1, ty * tx);
  }

  template <typename T>
  void SampleByTaps(const Tensor& x, const Tensor& grid, GridSampleState& state, Tensor& y) const {
    const int64_t n_batch = x.dim(0), channels = x.dim(1), h = x.dim(2), w = x.dim(3);
    const int64_t points = grid.dim(1) * grid.dim(2);
    const int taps = mode_ == Mode::kNearest ? 1 : mode_ == Mode::kBilinear ? 4 : 16;
    T* py = y.mutable_data<T>();
    if (h * w == 0) {
      std::fill(py, py + y.NumElements(), T(0));
      return;
    }
    std::vector<T>& weights = state.weights(static_cast<T*>(nullptr));
    state.offsets.resize(taps * points);
    weights.resize(taps * points);
    const bool vector = ActiveIsa() >= Isa::kAvx2;
    for (int64_t n = 0; n < n_batch; ++n) {
      const T* g = grid.data<T>() + n * points * 2;
      for (int64_t p = 0; p < points; ++p) {
        LocationTaps(Unnormalize(g[2 * p], w, align_corners_),
                     Unnormalize(g[2 * p + 1], h, align_corners_), h, w, points,
                     state.offsets.data() + p, weights.data() + p);
      }
      for (int64_t c = 0; c < channels; ++c) {
        const T* image = x.data<T>() + (n * channels + c) * h * w;
        T* out = py + (n * channels + c) * points;
        if constexpr (std::is_same_v<T, float>) {
          if (vector) {
            ApplyTaps256(image, state.offsets.data(), weights.data(), taps, points, out);
            continue;
          }
        }
        ApplyTapsScalar(image, state.offsets.data(), weights.data(), taps, 0, points, out);
      }
    }
  }

  // Location by location, for planes too large for 32-bit tap offsets.
  template <typename T>
  void Sample(const Tensor& x, const Tensor& grid, Tensor& y) const {
    const int64_t n_batch = x.dim(0), channels = x.dim(1), h = x.dim(2), w = x.dim(3);
    const int64_t h_out = grid.dim(1), w_out = grid.dim(2);
    const T* px = x.data<T>();
    const T* pg = grid.data<T>();
    T* py = y.mutable_data<T>();
    const int64_t plane = h * w;
    const int64_t out_plane = h_out * w_out;
    // A pixel, or 0 outside the image.
    auto at = [&](const T* image, int64_t r, int64_t c) -> double {
      return (r >= 0 && r < h && c >= 0 && c < w) ? static_cast<double>(image[r * w + c]) : 0.0;
    };
    for (int64_t n = 0; n < n_batch; ++n) {
      for (int64_t p = 0; p < out_plane; ++p) {
        const T* g = pg + (n * out_plane + p) * 2;
        const double gx = Unnormalize(g[0], w, align_corners_);
        const double gy = Unnormalize(g[1], h, align_corners_);
        for (int64_t c = 0; c < channels; ++c) {
          const T* image = px + (n * channels + c) * plane;
          double v = 0;
          if (mode_ == Mode::kBicubic) {
            // Taps around the unpadded location; padding applies to each tap's coordinate.
            const double fx = std::floor(gx), fy = std::floor(gy);
            double wx[4], wy[4];
            CubicWeights(gx - fx, wx);
            CubicWeights(gy - fy, wy);
            for (int j = 0; j < 4; ++j) {
              double row = 0;
              for (int i = 0; i < 4; ++i) {
                const double cx = Pad(fx - 1 + i, w, padding_, align_corners_);
                const double cy = Pad(fy - 1 + j, h, padding_, align_corners_);
                row += wx[i] * at(image, Index(cy), Index(cx));
              }
              v += wy[j] * row;
            }
          } else {
            const double sx = Pad(gx, w, padding_, align_corners_);
            const double sy = Pad(gy, h, padding_, align_corners_);
            if (mode_ == Mode::kNearest) {
              // Round half to even, as nearbyint in the default rounding mode.
              v = at(image, Index(std::nearbyint(sy)), Index(std::nearbyint(sx)));
            } else {
              const double x0 = std::floor(sx), y0 = std::floor(sy);
              const double tx = sx - x0, ty = sy - y0;
              const int64_t c0 = Index(x0), r0 = Index(y0);
              v = (1 - ty) * ((1 - tx) * at(image, r0, c0) + tx * at(image, r0, c0 + 1)) +
                  ty * ((1 - tx) * at(image, r0 + 1, c0) + tx * at(image, r0 + 1, c0 + 1));
            }
          }
          py[(n * channels + c) * out_plane + p] = static_cast<T>(v);
        }
      }
    }
  }

  Mode mode_ = Mode::kBilinear;
  Padding padding_ = Padding::kZeros;
  bool align_corners_ = false;
};

}  // namespace

void RegisterGridSampleKernels(KernelRegistry& registry) {
  registry.Register("GridSample", FactoryOf<GridSampleKernel>(), 16);
}

}  // namespace loopserve::engine::native
