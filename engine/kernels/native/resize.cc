// Resize (opsets 10-17) and Upsample (7-9): nearest, n-linear and n-cubic interpolation with the
// ONNX coordinate transformation modes.
//
// Interpolation is separable: for every output dim a table gives, per output index, the input
// indices and weights along that dim (built once per run into reused state buffers); an output
// element is the weighted sum over the product of its per-dim neighbours.

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"
#include "engine/kernels/native/saturate.h"

namespace loopserve::engine::native {
namespace {

enum class Mode : uint8_t { kNearest, kLinear, kCubic };
enum class Transform : uint8_t {
  kHalfPixel,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn,
  kTfCropAndResize
};
enum class Rounding : uint8_t { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

// Per output dim: for each output index, `taps` input indices and weights, or `outside` when the
// point falls outside the crop (tf_crop_and_resize), which yields the extrapolation value.
struct DimTable {
  int taps = 1;
  std::vector<int64_t> index;    // [out_len * taps]
  std::vector<double> weight;    // [out_len * taps]
  std::vector<uint8_t> outside;  // [out_len]
};

class ResizeState : public KernelState {
 public:
  std::vector<DimTable> tables;
  std::vector<float> row;  // the 2-D fast path's vertically interpolated row
};

// Whether `t` maps every output index to the same input index with weight 1.
bool IsIdentity(const DimTable& t, int64_t len) {
  if (!t.outside.empty()) return false;
  for (int64_t o = 0; o < len; ++o) {
    for (int k = 0; k < t.taps; ++k) {
      const double w = t.weight[o * t.taps + k];
      if (w != 0 && (w != 1 || t.index[o * t.taps + k] != o)) return false;
    }
  }
  return true;
}

// Float32 resize of the last two dims (every outer dim kept, as image resizes are): per output
// row, the weighted input rows are summed into one row (a vectorisable loop over W), then each
// output element takes its horizontal taps from it. `tables` are the two dims' tables.
void ResizeLastTwo(const float* in, int64_t planes, int64_t h, int64_t w, const DimTable& ty,
                   int64_t oh, const DimTable& tx, int64_t ow, std::vector<float>& row,
                   float* out) {
  if (ty.taps == 1 && tx.taps == 1) {
    // Nearest (every weight 1): an output row picks columns of one input row, and one whose input
    // row is the previous output row's repeats that row.
    for (int64_t p = 0; p < planes; ++p) {
      const float* plane = in + p * h * w;
      float* out_plane = out + p * oh * ow;
      for (int64_t oy = 0; oy < oh; ++oy) {
        float* dst = out_plane + oy * ow;
        if (oy > 0 && ty.index[oy] == ty.index[oy - 1]) {
          std::memcpy(dst, dst - ow, static_cast<size_t>(ow) * sizeof(float));
          continue;
        }
        const float* src = plane + ty.index[oy] * w;
        for (int64_t ox = 0; ox < ow; ++ox) dst[ox] = src[tx.index[ox]];
      }
    }
    return;
  }
  row.resize(static_cast<size_t>(w));
  float* r = row.data();
  for (int64_t p = 0; p < planes; ++p) {
    const float* plane = in + p * h * w;
    float* out_plane = out + p * oh * ow;
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t x = 0; x < w; ++x) r[x] = 0.0f;
      for (int k = 0; k < ty.taps; ++k) {
        const float wy = static_cast<float>(ty.weight[oy * ty.taps + k]);
        if (wy == 0.0f) continue;
        const float* src = plane + ty.index[oy * ty.taps + k] * w;
        for (int64_t x = 0; x < w; ++x) r[x] += wy * src[x];
      }
      float* dst = out_plane + oy * ow;
      for (int64_t ox = 0; ox < ow; ++ox) {
        float sum = 0.0f;
        for (int k = 0; k < tx.taps; ++k) {
          sum += static_cast<float>(tx.weight[ox * tx.taps + k]) * r[tx.index[ox * tx.taps + k]];
        }
        dst[ox] = sum;
      }
    }
  }
}

class ResizeKernel final : public Kernel {
 public:
  // `legacy`: Upsample and Resize-10 (inputs X, scales; asymmetric coordinates, floor rounding).
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, bool legacy) {
    const Node& node = init.node();
    auto k = std::unique_ptr<ResizeKernel>(new ResizeKernel());
    k->legacy_ = legacy;
    LS_ASSIGN_OR_RETURN(std::string mode, node.GetString("mode", std::string("nearest")));
    if (mode == "nearest") {
      k->mode_ = Mode::kNearest;
    } else if (mode == "linear" || mode == "bilinear") {
      k->mode_ = Mode::kLinear;
    } else if (mode == "cubic") {
      k->mode_ = Mode::kCubic;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unsupported mode '", mode, "'"));
    }
    if (legacy) {
      LS_RETURN_IF_ERROR(CheckArity(init, node.opset < 9 ? 1 : 2, node.opset < 9 ? 1 : 2));
      k->transform_ = Transform::kAsymmetric;
      k->rounding_ = Rounding::kFloor;
      if (node.opset < 9) {
        const Attribute* a = node.FindAttribute("scales");
        if (a == nullptr || a->type != Attribute::Type::kFloats) {
          return absl::InvalidArgumentError("attribute 'scales' (floats) is required");
        }
        k->attr_scales_.assign(a->floats.begin(), a->floats.end());
      }
      return std::unique_ptr<Kernel>(std::move(k));
    }
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 4));
    if (node.FindAttribute("axes") != nullptr) {
      return absl::UnimplementedError("attribute 'axes' is not supported");
    }
    LS_ASSIGN_OR_RETURN(std::string ct, node.GetString("coordinate_transformation_mode",
                                                       std::string("half_pixel")));
    if (ct == "half_pixel") {
      k->transform_ = Transform::kHalfPixel;
    } else if (ct == "pytorch_half_pixel") {
      k->transform_ = Transform::kPytorchHalfPixel;
    } else if (ct == "align_corners") {
      k->transform_ = Transform::kAlignCorners;
    } else if (ct == "asymmetric") {
      k->transform_ = Transform::kAsymmetric;
    } else if (ct == "tf_half_pixel_for_nn") {
      k->transform_ = Transform::kTfHalfPixelForNn;
    } else if (ct == "tf_crop_and_resize") {
      k->transform_ = Transform::kTfCropAndResize;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported coordinate_transformation_mode '", ct, "'"));
    }
    LS_ASSIGN_OR_RETURN(std::string nm,
                        node.GetString("nearest_mode", std::string("round_prefer_floor")));
    if (nm == "round_prefer_floor") {
      k->rounding_ = Rounding::kRoundPreferFloor;
    } else if (nm == "round_prefer_ceil") {
      k->rounding_ = Rounding::kRoundPreferCeil;
    } else if (nm == "floor") {
      k->rounding_ = Rounding::kFloor;
    } else if (nm == "ceil") {
      k->rounding_ = Rounding::kCeil;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unsupported nearest_mode '", nm, "'"));
    }
    LS_ASSIGN_OR_RETURN(k->cubic_a_, node.GetFloat("cubic_coeff_a", -0.75f));
    LS_ASSIGN_OR_RETURN(int64_t exclude, node.GetInt("exclude_outside", 0));
    k->exclude_outside_ = exclude != 0;
    LS_ASSIGN_OR_RETURN(k->extrapolation_, node.GetFloat("extrapolation_value", 0.0f));
    k->scales_input_ = node.opset >= 11 ? 2 : 1;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<ResizeState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    double scales[8];
    double roi[16];
    if (rank > 8) return absl::UnimplementedError("rank above 8");
    for (int d = 0; d < rank; ++d) {
      scales[d] = 1;
      roi[d] = 0;
      roi[d + rank] = 1;
    }
    Shape out_shape = x.shape();
    LS_RETURN_IF_ERROR(ResolveScales(ctx, scales, out_shape));
    LS_RETURN_IF_ERROR(ReadRoi(ctx, rank, roi));
    LS_ASSIGN_OR_RETURN(out_shape, ValidateDims(out_shape.dims(), "output"));
    for (int d = 0; d < rank; ++d) {
      if (x.dim(d) == 0 && out_shape[d] > 0) {
        return absl::InvalidArgumentError("cannot resize an empty dim to a non-empty one");
      }
    }
    std::vector<DimTable>& tables = ctx.state<ResizeState>()->tables;
    tables.resize(rank);
    for (int d = 0; d < rank; ++d) {
      BuildTable(x.dim(d), out_shape[d], scales[d], roi[d], roi[d + rank], tables[d]);
    }
    if (ResizesOnlyLastTwo(x, out_shape, tables)) {
      Tensor* y = ctx.output(0, x.dtype(), out_shape);
      const int64_t planes = x.shape().NumElements(0, rank - 2);
      if (y->NumElements() > 0) {
        ResizeLastTwo(x.data<float>(), planes, x.dim(rank - 2), x.dim(rank - 1), tables[rank - 2],
                      out_shape[rank - 2], tables[rank - 1], out_shape[rank - 1],
                      ctx.state<ResizeState>()->row, y->mutable_data<float>());
      }
      return absl::OkStatus();
    }
    bool ok = false;
    DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      ok = true;
      RunGeneral<T>(ctx, out_shape, tables);
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }

 private:
  ResizeKernel() = default;

  // The per-dim scales and the output shape, from `sizes` (opset 11+) when given, else from the
  // `scales` attribute or input.
  absl::Status ResolveScales(KernelContext& ctx, double* scales, Shape& out_shape) const {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    if (!legacy_ && ctx.has_input(3) && ctx.input(3).NumElements() > 0) {
      DimVector sizes;
      LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(3), "input 'sizes'", &sizes));
      if (static_cast<int>(sizes.size()) != rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("sizes has ", sizes.size(), " values for rank ", rank));
      }
      for (int d = 0; d < rank; ++d) {
        out_shape[d] = sizes[d];
        scales[d] = x.dim(d) == 0 ? 1 : static_cast<double>(sizes[d]) / x.dim(d);
      }
      return absl::OkStatus();
    }
    if (!attr_scales_.empty()) {
      if (static_cast<int>(attr_scales_.size()) != rank) {
        return absl::InvalidArgumentError("scales must have one value per dim");
      }
      for (int d = 0; d < rank; ++d) scales[d] = attr_scales_[d];
    } else {
      const int si = legacy_ ? 1 : scales_input_;
      if (!ctx.has_input(si) || ctx.input(si).NumElements() != rank ||
          ctx.input(si).dtype() != DataType::kFloat32) {
        return absl::InvalidArgumentError(
            absl::StrCat("exactly one of scales and sizes must be given (scales: float32, one "
                         "value per dim of rank ",
                         rank, ")"));
      }
      for (int d = 0; d < rank; ++d) scales[d] = ctx.input(si).data<float>()[d];
    }
    for (int d = 0; d < rank; ++d) {
      if (!(scales[d] > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("scale ", scales[d], " is not positive"));
      }
      out_shape[d] = static_cast<int64_t>(std::floor(x.dim(d) * scales[d]));
    }
    return absl::OkStatus();
  }

  // tf_crop_and_resize's region of interest: [starts..., ends...], when given.
  absl::Status ReadRoi(KernelContext& ctx, int rank, double* roi) const {
    if (transform_ != Transform::kTfCropAndResize || !ctx.has_input(1) ||
        ctx.input(1).NumElements() == 0) {
      return absl::OkStatus();
    }
    const Tensor& r = ctx.input(1);
    if (r.NumElements() != 2 * rank || !IsFloatingPoint(r.dtype())) {
      return absl::InvalidArgumentError("roi must hold 2 x rank float values");
    }
    for (int i = 0; i < 2 * rank; ++i) {
      roi[i] = r.dtype() == DataType::kFloat32 ? r.data<float>()[i] : r.data<double>()[i];
    }
    return absl::OkStatus();
  }

  // Whether the 2-D fast path applies: float32, only the last two dims resized, none outside.
  static bool ResizesOnlyLastTwo(const Tensor& x, const Shape& out_shape,
                                 const std::vector<DimTable>& tables) {
    const int rank = x.rank();
    if (x.dtype() != DataType::kFloat32 || rank < 2 || !tables[rank - 2].outside.empty() ||
        !tables[rank - 1].outside.empty()) {
      return false;
    }
    bool outer_kept = true;
    for (int d = 0; d < rank - 2 && outer_kept; ++d) {
      outer_kept = out_shape[d] == x.dim(d) && IsIdentity(tables[d], x.dim(d));
    }
    return outer_kept;
  }

  // The general path: every output element as the weighted sum over all dims' taps.
  template <typename T>
  void RunGeneral(KernelContext& ctx, const Shape& out_shape,
                  const std::vector<DimTable>& tables) const {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    DimVector strides;
    RowMajorStrides(x.shape(), &strides);
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    const T* in = x.data<T>();
    T* out = y->mutable_data<T>();
    const int64_t n = out_shape.NumElements();
    DimVector coord(rank, 0);
    for (int64_t o = 0; o < n; ++o) {
      const double v = Eval(in, 0, 0, coord, tables, strides);
      if constexpr (std::is_integral_v<T>) {
        out[o] = SaturatingCast<T>(std::nearbyint(v));  // cubic overshoot, extrapolation
      } else {
        out[o] = static_cast<T>(v);
      }
      for (int d = rank - 1; d >= 0; --d) {
        if (++coord[d] < out_shape[d]) break;
        coord[d] = 0;
      }
    }
  }

  // The weighted sum over dims [d, rank) for output coordinate `coord`, starting at `offset`.
  template <typename T>
  double Eval(const T* in, int d, int64_t offset, const DimVector& coord,
              const std::vector<DimTable>& tables, const DimVector& strides) const {
    if (d == static_cast<int>(tables.size())) return static_cast<double>(in[offset]);
    const DimTable& t = tables[d];
    const int64_t o = coord[d];
    if (!t.outside.empty() && t.outside[o]) return extrapolation_;
    double sum = 0;
    for (int k = 0; k < t.taps; ++k) {
      const double w = t.weight[o * t.taps + k];
      if (w == 0) continue;
      sum += w *
             Eval(in, d + 1, offset + t.index[o * t.taps + k] * strides[d], coord, tables, strides);
    }
    return sum;
  }

  double Original(int64_t x, double scale, int64_t in_len, int64_t out_len, double start,
                  double end) const {
    const double xr = static_cast<double>(x);
    switch (transform_) {
      case Transform::kHalfPixel:
        return (xr + 0.5) / scale - 0.5;
      case Transform::kPytorchHalfPixel:
        return out_len > 1 ? (xr + 0.5) / scale - 0.5 : 0;
      case Transform::kAlignCorners:
        return out_len == 1 ? 0 : xr * (in_len - 1) / static_cast<double>(out_len - 1);
      case Transform::kAsymmetric:
        return xr / scale;
      case Transform::kTfHalfPixelForNn:
        return (xr + 0.5) / scale;
      case Transform::kTfCropAndResize:
        return out_len > 1 ? start * (in_len - 1) + xr * (end - start) * (in_len - 1) /
                                                        static_cast<double>(out_len - 1)
                           : 0.5 * (start + end) * (in_len - 1);
    }
    return xr;
  }

  void BuildTable(int64_t in_len, int64_t out_len, double scale, double start, double end,
                  DimTable& t) const {
    t.taps = mode_ == Mode::kNearest ? 1 : (mode_ == Mode::kLinear ? 2 : 4);
    t.index.assign(static_cast<size_t>(out_len * t.taps), 0);
    t.weight.assign(static_cast<size_t>(out_len * t.taps), 0);
    t.outside.assign(transform_ == Transform::kTfCropAndResize ? out_len : 0, 0);
    auto clamp = [&](int64_t i) { return std::min(std::max<int64_t>(i, 0), in_len - 1); };
    for (int64_t o = 0; o < out_len; ++o) {
      const double xo = Original(o, scale, in_len, out_len, start, end);
      if (transform_ == Transform::kTfCropAndResize && (xo < 0 || xo > in_len - 1)) {
        t.outside[o] = 1;
        continue;
      }
      int64_t* idx = &t.index[o * t.taps];
      double* w = &t.weight[o * t.taps];
      if (mode_ == Mode::kNearest) {
        int64_t i;
        const double fl = std::floor(xo);
        switch (rounding_) {
          case Rounding::kRoundPreferFloor:
            i = static_cast<int64_t>(xo - fl == 0.5 ? fl : std::round(xo));
            break;
          case Rounding::kRoundPreferCeil:
            i = static_cast<int64_t>(xo - fl == 0.5 ? fl + 1 : std::round(xo));
            break;
          case Rounding::kFloor:
            i = static_cast<int64_t>(fl);
            break;
          default:
            i = static_cast<int64_t>(std::ceil(xo));
            break;
        }
        idx[0] = clamp(i);
        w[0] = 1;
        continue;
      }
      const double fl = std::floor(xo);
      const double r = xo - fl;
      const int64_t base = static_cast<int64_t>(fl);
      double c[4];
      int64_t first;
      if (mode_ == Mode::kLinear) {
        c[0] = 1 - r;
        c[1] = r;
        first = base;
      } else {
        const double a = cubic_a_;
        const double p = r + 1;
        const double q = 1 - r;
        const double s = q + 1;
        c[0] = ((a * p - 5 * a) * p + 8 * a) * p - 4 * a;
        c[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
        c[2] = ((a + 2) * q - (a + 3)) * q * q + 1;
        c[3] = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a;
        first = base - 1;
      }
      double total = 0;
      for (int k = 0; k < t.taps; ++k) {
        const int64_t i = first + k;
        if (exclude_outside_ && (i < 0 || i >= in_len)) c[k] = 0;
        total += c[k];
        idx[k] = clamp(i);
        w[k] = c[k];
      }
      if (exclude_outside_ && total != 0) {
        for (int k = 0; k < t.taps; ++k) w[k] /= total;
      }
    }
  }

  bool legacy_ = false;
  Mode mode_ = Mode::kNearest;
  Transform transform_ = Transform::kHalfPixel;
  Rounding rounding_ = Rounding::kRoundPreferFloor;
  float cubic_a_ = -0.75f;
  bool exclude_outside_ = false;
  float extrapolation_ = 0;
  int scales_input_ = 2;
  std::vector<float> attr_scales_;
};

}  // namespace

void RegisterResizeKernels(KernelRegistry& registry) {
  registry.Register("Upsample", FactoryOf<ResizeKernel>(true), 7, 9);
  registry.Register("Resize", FactoryOf<ResizeKernel>(true), 10, 10);
  registry.Register("Resize", FactoryOf<ResizeKernel>(false), 11);
}

}  // namespace loopserve::engine::native
