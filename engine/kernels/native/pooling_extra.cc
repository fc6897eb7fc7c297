// MeanVarianceNormalization, MaxUnpool, RoiAlign and LpPool.

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/window_attrs.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"
#include "engine/kernels/native/vector_math.h"
#include "engine/kernels/reference/reference.h"

// `#pragma omp simd` below is a hint: clang at the sanitizer build's -O1 does not vectorize and
// would report each loop as a failed transformation (an error under -Werror).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

namespace loopserve::engine::native {
namespace {

double LoadFloat(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
}

void StoreFloat(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DataType::kFloat32) {
    t.mutable_data<float>()[i] = static_cast<float>(v);
  } else {
    t.mutable_data<double>()[i] = v;
  }
}

class MvnState : public KernelState {
 public:
  std::vector<double> sum, squares;  // per statistics group
  std::vector<float> shift_f, scale_f;
  std::vector<double> shift_d, scale_d;
  std::vector<float>& shift(float*) { return shift_f; }
  std::vector<float>& scale(float*) { return scale_f; }
  std::vector<double>& shift(double*) { return shift_d; }
  std::vector<double>& scale(double*) { return scale_d; }
};

// The input seen as alternating blocks of reduced and kept dimensions (adjacent dimensions of one
// kind merged, size-1 ones dropped): rows of the last block's length `row`, each row either all
// of one statistics group (the last block reduced) or `row` consecutive groups (kept).
struct MvnLayout {
  DimVector sizes;  // the blocks before the last one
  DimVector kept;   // whether each of those is a kept block (1) or a reduced one (0)
  int64_t row = 1;
  bool row_reduced = false;
  int64_t groups = 1, group_size = 1;

  // The first statistics group of row r.
  int64_t FirstGroup(int64_t r) const {
    int64_t g = 0, kept_stride = row_reduced ? 1 : row;
    for (int b = static_cast<int>(sizes.size()) - 1; b >= 0; --b) {
      const int64_t coord = r % sizes[b];
      r /= sizes[b];
      if (kept[b]) {
        g += coord * kept_stride;
        kept_stride *= sizes[b];
      }
    }
    return g;
  }
};

MvnLayout MakeMvnLayout(const Shape& shape, const bool* reduced) {
  DimVector sizes;
  DimVector kept;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (!kept.empty() && kept.back() == !reduced[d]) {
      sizes.back() *= shape[d];
    } else {
      sizes.push_back(shape[d]);
      kept.push_back(!reduced[d]);
    }
  }
  MvnLayout layout;
  for (size_t b = 0; b < sizes.size(); ++b)
    (kept[b] ? layout.groups : layout.group_size) *= sizes[b];
  if (!sizes.empty()) {
    layout.row = sizes.back();
    layout.row_reduced = !kept.back();
    sizes.pop_back();
    kept.pop_back();
  }
  layout.sizes = std::move(sizes);
  layout.kept = std::move(kept);
  return layout;
}

// MeanVarianceNormalization(X; axes = [0, 2, 3]): (X - mean) / (sqrt(variance) + 1e-9), mean and
// variance over `axes` (the function body of the spec). One pass over rows of the input sums x and
// x^2 per group in double, a second writes (x - mean) * (1 / (sd + 1e-9)) per row.
class MvnKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                        init.node().GetInts("axes", std::vector<int64_t>{0, 2, 3}));
    return std::unique_ptr<Kernel>(new MvnKernel(std::move(axes)));
  }

  std::unique_ptr<KernelState> CreateState() const override { return std::make_unique<MvnState>(); }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (!IsFloatingPoint(x.dtype())) return UnsupportedType("X", x.dtype());
    if (x.rank() > kMaxRank) return absl::InvalidArgumentError("input rank is too large");
    DimVector axes(axes_.begin(), axes_.end());
    LS_RETURN_IF_ERROR(NormalizeAxes(axes, x.rank(), "axes"));
    Tensor* y = ctx.output(0, x.dtype(), x.shape());
    if (x.NumElements() == 0) return absl::OkStatus();
    bool reduced[kMaxRank] = {};
    for (int64_t a : axes) reduced[a] = true;
    const MvnLayout layout = MakeMvnLayout(x.shape(), reduced);
    MvnState& s = *ctx.state<MvnState>();
    if (x.dtype() == DataType::kFloat32) {
      Normalize(layout, x.data<float>(), y->mutable_data<float>(), x.NumElements(), s);
    } else {
      Normalize(layout, x.data<double>(), y->mutable_data<double>(), x.NumElements(), s);
    }
    return absl::OkStatus();
  }

 private:
  static constexpr int kMaxRank = 64;
  explicit MvnKernel(std::vector<int64_t> axes) : axes_(std::move(axes)) {}

  template <typename T>
  static void Normalize(const MvnLayout& layout, const T* x, T* y, int64_t n, MvnState& s) {
    const int64_t row = layout.row, rows = n / row;
    s.sum.assign(layout.groups, 0.0);
    s.squares.assign(layout.groups, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* in = x + r * row;
      const int64_t g = layout.FirstGroup(r);
      if (layout.row_reduced) {
        double sum = 0, squares = 0;
#pragma omp simd reduction(+ : sum, squares)
        for (int64_t i = 0; i < row; ++i) {
          const double v = in[i];
          sum += v;
          squares += v * v;
        }
        s.sum[g] += sum;
        s.squares[g] += squares;
      } else {
        double* sum = s.sum.data() + g;
        double* squares = s.squares.data() + g;
#pragma omp simd
        for (int64_t i = 0; i < row; ++i) {
          const double v = in[i];
          sum[i] += v;
          squares[i] += v * v;
        }
      }
    }
    std::vector<T>& shift = s.shift(static_cast<T*>(nullptr));
    std::vector<T>& scale = s.scale(static_cast<T*>(nullptr));
    shift.resize(layout.groups);
    scale.resize(layout.groups);
    const double count = static_cast<double>(layout.group_size);
    for (int64_t g = 0; g < layout.groups; ++g) {
      const double mean = s.sum[g] / count;
      const double variance = std::max(0.0, s.squares[g] / count - mean * mean);
      shift[g] = static_cast<T>(mean);
      scale[g] = static_cast<T>(1.0 / (std::sqrt(variance) + 1e-9));
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T* in = x + r * row;
      T* out = y + r * row;
      const int64_t g = layout.FirstGroup(r);
      if (layout.row_reduced) {
        const T m = shift[g], a = scale[g];
#pragma omp simd
        for (int64_t i = 0; i < row; ++i) out[i] = (in[i] - m) * a;
      } else {
        const T* m = shift.data() + g;
        const T* a = scale.data() + g;
#pragma omp simd
        for (int64_t i = 0; i < row; ++i) out[i] = (in[i] - m[i]) * a[i];
      }
    }
  }

  std::vector<int64_t> axes_;
};

// MaxUnpool(X, I, output_shape?; kernel_shape, strides, pads): zeros with X[i] at the flat index
// I[i] of the tensor MaxPool read, [N, C, (in - 1) * stride + kernel - pads...]. With an
// output_shape of other spatial dims, each index is read as coordinates of that pooled-input
// shape and placed at the same coordinates of the output (as the ONNX reference does).
class MaxUnpoolKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 3));
    const Node& node = init.node();
    auto kernel = std::unique_ptr<MaxUnpoolKernel>(new MaxUnpoolKernel());
    LS_ASSIGN_OR_RETURN(kernel->kernel_, node.GetInts("kernel_shape", std::nullopt));
    LS_ASSIGN_OR_RETURN(kernel->strides_, node.GetInts("strides", std::vector<int64_t>{}));
    LS_ASSIGN_OR_RETURN(kernel->pads_, node.GetInts("pads", std::vector<int64_t>{}));
    const size_t r = kernel->kernel_.size();
    if ((!kernel->strides_.empty() && kernel->strides_.size() != r) ||
        (!kernel->pads_.empty() && kernel->pads_.size() != 2 * r)) {
      return absl::InvalidArgumentError("strides and pads must match kernel_shape's length");
    }
    constexpr int64_t kMaxAttr = int64_t{1} << 31;
    for (const auto* list : {&kernel->kernel_, &kernel->strides_, &kernel->pads_}) {
      for (int64_t v : *list) {
        if (v < 0 || v > kMaxAttr || (list != &kernel->pads_ && v == 0)) {
          return absl::InvalidArgumentError(absl::StrCat("window attribute value ", v));
        }
      }
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const int rank = x.rank() - 2;
    if (rank != static_cast<int>(kernel_.size()) || indices.shape() != x.shape() ||
        indices.dtype() != DataType::kInt64) {
      return absl::InvalidArgumentError(
          absl::StrCat("X ", x.shape().ToString(), " and I ", indices.DebugString(4),
                       " must have the same shape, with as many spatial dims as kernel_shape (",
                       kernel_.size(), "), and I must be int64"));
    }
    Shape::Dims pooled = {x.dim(0), x.dim(1)};
    for (int i = 0; i < rank; ++i) {
      const int64_t s = strides_.empty() ? 1 : strides_[i];
      const int64_t pad = pads_.empty() ? 0 : pads_[i] + pads_[i + rank];
      pooled.push_back((x.dim(i + 2) - 1) * s + kernel_[i] - pad);
    }
    LS_ASSIGN_OR_RETURN(Shape pooled_shape, ValidateDims(pooled, "unpooled shape"));
    Shape out_shape = pooled_shape;
    if (ctx.has_input(2)) {
      DimVector dims;
      LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(2), "output_shape", &dims));
      LS_ASSIGN_OR_RETURN(out_shape, ValidateDims(dims, "output_shape"));
      if (out_shape.rank() != x.rank()) {
        return absl::InvalidArgumentError(
            absl::StrCat("output_shape ", out_shape.ToString(), " must have rank ", x.rank()));
      }
    }
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    std::memset(y->mutable_raw_data(), 0, y->ByteSize());
    const int64_t total = pooled_shape.NumElements();
    const size_t elem = DataTypeSize(x.dtype());
    if (elem == 0 || x.dtype() == DataType::kString) return UnsupportedType("X", x.dtype());
    const int64_t* idx = indices.data<int64_t>();
    const bool remap = out_shape != pooled_shape;
    for (int64_t i = 0; i < x.NumElements(); ++i) {
      int64_t at = idx[i];
      if (at < 0 || at >= total) {
        return absl::InvalidArgumentError(
            absl::StrCat("index ", at, " is outside the unpooled tensor of ", total, " elements"));
      }
      if (remap) {
        int64_t rem = at, out_at = 0, scale = 1;
        bool inside = true;
        for (int d = x.rank() - 1; d >= 0; --d) {
          const int64_t c = rem % pooled_shape[d];
          rem /= pooled_shape[d];
          inside = inside && c < out_shape[d];
          out_at += c * scale;
          scale *= out_shape[d];
        }
        if (!inside) continue;
        at = out_at;
      }
      std::memcpy(static_cast<char*>(y->mutable_raw_data()) + at * elem,
                  static_cast<const char*>(x.raw_data()) + i * elem, elem);
    }
    return absl::OkStatus();
  }

 private:
  MaxUnpoolKernel() = default;
  std::vector<int64_t> kernel_, strides_, pads_;
};

// The sampling taps of one roi along one axis: for each output bin, the input rows (or columns)
// its samples touch and the summed bilinear weight of each (taps of bin b are
// [begin[b], begin[b + 1])).
struct RoiTaps {
  std::vector<int64_t> begin, index;
  std::vector<double> weight;

  // Samples at first + b * bin + (i + 0.5) * bin / grid, i < grid, for each bin b < bins, on an
  // axis of `size` pixels: each sample at s weighs (1 - frac) on floor(s) and frac on the next
  // pixel (clamped at the edges), and nothing when s is outside [-1, size].
  void Build(double first, double bin, int64_t bins, int64_t grid, int64_t size) {
    begin.assign(1, 0);
    index.clear();
    weight.clear();
    for (int64_t b = 0; b < bins; ++b) {
      const int64_t start = static_cast<int64_t>(index.size());
      for (int64_t i = 0; i < grid; ++i) {
        double at = first + b * bin + (i + 0.5) * bin / grid;
        if (size <= 0 || !(at >= -1.0 && at <= size)) continue;
        at = std::max(at, 0.0);
        int64_t lo = static_cast<int64_t>(at), hi;
        if (lo >= size - 1) {
          lo = hi = size - 1;
          at = static_cast<double>(lo);
        } else {
          hi = lo + 1;
        }
        const double frac = at - lo;
        Add(start, lo, 1 - frac);
        Add(start, hi, frac);
      }
      begin.push_back(static_cast<int64_t>(index.size()));
    }
  }

 private:
  // Samples come in order and each touches a pixel and the next, so a pixel already among the
  // bin's taps is one of the last two (for a reversed roi it may be missed: a second tap for the
  // same pixel, which sums the same).
  void Add(int64_t start, int64_t at, double w) {
    const int64_t size = static_cast<int64_t>(index.size());
    for (int64_t t = std::max(start, size - 2); t < size; ++t) {
      if (index[t] == at) {
        weight[t] += w;
        return;
      }
    }
    index.push_back(at);
    weight.push_back(w);
  }
};

class RoiAlignState : public KernelState {
 public:
  RoiTaps rows, cols;
  std::vector<float> sums_f;  // one output row's input rows summed, over the touched columns
  std::vector<double> sums_d;
  std::vector<float>& sums(float*) { return sums_f; }
  std::vector<double>& sums(double*) { return sums_d; }
};

// RoiAlign(X [N, C, H, W], rois [R, 4], batch_indices [R]; mode, output_height, output_width,
// sampling_ratio, spatial_scale, coordinate_transformation_mode): bilinear samples on a regular
// grid in each bin, averaged (or their largest corner-weighted value, mode 'max'), as ONNX
// Runtime computes it. The average is separable: bilinear weights factor into a row weight and a
// column weight, and a sample outside the image in either direction contributes nothing, so each
// roi's bins are (row taps) x plane x (column taps): per channel and output row, its input rows
// are summed over the columns the roi touches, then each bin takes its column taps.
class RoiAlignKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 3, 3));
    const Node& node = init.node();
    auto kernel = std::unique_ptr<RoiAlignKernel>(new RoiAlignKernel());
    LS_ASSIGN_OR_RETURN(const std::string mode, node.GetString("mode", "avg"));
    LS_ASSIGN_OR_RETURN(kernel->out_h_, node.GetInt("output_height", 1));
    LS_ASSIGN_OR_RETURN(kernel->out_w_, node.GetInt("output_width", 1));
    LS_ASSIGN_OR_RETURN(kernel->sampling_ratio_, node.GetInt("sampling_ratio", 0));
    LS_ASSIGN_OR_RETURN(kernel->spatial_scale_, node.GetFloat("spatial_scale", 1.0f));
    LS_ASSIGN_OR_RETURN(const std::string transform,
                        node.GetString("coordinate_transformation_mode",
                                       node.opset >= 16 ? "half_pixel" : "output_half_pixel"));
    if (mode != "avg" && mode != "max") {
      return absl::InvalidArgumentError(absl::StrCat("mode '", mode, "' is not avg or max"));
    }
    if (transform != "half_pixel" && transform != "output_half_pixel") {
      return absl::InvalidArgumentError(absl::StrCat("coordinate_transformation_mode '", transform,
                                                     "' is not half_pixel or "
                                                     "output_half_pixel"));
    }
    constexpr int64_t kMaxOut = int64_t{1} << 20;
    if (kernel->out_h_ < 1 || kernel->out_w_ < 1 || kernel->out_h_ > kMaxOut ||
        kernel->out_w_ > kMaxOut || kernel->sampling_ratio_ < 0 ||
        kernel->sampling_ratio_ > kMaxOut) {
      return absl::InvalidArgumentError("output size and sampling_ratio are out of range");
    }
    kernel->max_ = mode == "max";
    kernel->half_pixel_ = transform == "half_pixel";
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<RoiAlignState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& rois = ctx.input(1);
    const Tensor& batch = ctx.input(2);
    if (!IsFloatingPoint(x.dtype()) || x.rank() != 4 || rois.dtype() != x.dtype() ||
        rois.rank() != 2 || rois.dim(1) != 4 || batch.rank() != 1 || batch.dim(0) != rois.dim(0) ||
        !IsInteger(batch.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "X ", x.shape().ToString(), ", rois ", rois.shape().ToString(), " and batch_indices ",
          batch.shape().ToString(), " must be float [N, C, H, W], [R, 4] and integer [R]"));
    }
    const int64_t num_rois = rois.dim(0), channels = x.dim(1), h = x.dim(2), w = x.dim(3);
    Tensor* y = ctx.output(0, x.dtype(), Shape{num_rois, channels, out_h_, out_w_});
    constexpr double kMaxGrid = 1 << 12;
    for (int64_t r = 0; r < num_rois; ++r) {
      int64_t image = 0;
      DispatchNumeric(batch.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        image = static_cast<int64_t>(batch.data<T>()[r]);
      });
      if (image < 0 || image >= x.dim(0)) {
        return absl::InvalidArgumentError(absl::StrCat("batch_indices[", r, "] = ", image,
                                                       " is outside the batch of ", x.dim(0)));
      }
      const double offset = half_pixel_ ? 0.5 : 0.0;
      const double x1 = LoadFloat(rois, r * 4) * spatial_scale_ - offset;
      const double y1 = LoadFloat(rois, r * 4 + 1) * spatial_scale_ - offset;
      const double x2 = LoadFloat(rois, r * 4 + 2) * spatial_scale_ - offset;
      const double y2 = LoadFloat(rois, r * 4 + 3) * spatial_scale_ - offset;
      double roi_w = x2 - x1, roi_h = y2 - y1;
      if (!half_pixel_) {
        roi_w = std::max(roi_w, 1.0);
        roi_h = std::max(roi_h, 1.0);
      }
      const double bin_h = roi_h / out_h_, bin_w = roi_w / out_w_;
      const double grid_hd = sampling_ratio_ > 0 ? sampling_ratio_ : std::ceil(roi_h / out_h_);
      const double grid_wd = sampling_ratio_ > 0 ? sampling_ratio_ : std::ceil(roi_w / out_w_);
      if (!(grid_hd <= kMaxGrid) || !(grid_wd <= kMaxGrid)) {
        return absl::InvalidArgumentError(
            absl::StrCat("roi ", r, " needs a sampling grid of ", grid_hd, " x ", grid_wd));
      }
      const int64_t grid_h = std::max<int64_t>(static_cast<int64_t>(grid_hd), 0);
      const int64_t grid_w = std::max<int64_t>(static_cast<int64_t>(grid_wd), 0);
      const double count = std::max<double>(static_cast<double>(grid_h * grid_w), 1.0);
      if (!max_) {
        RoiAlignState& state = *ctx.state<RoiAlignState>();
        if (x.dtype() == DataType::kFloat32) {
          AverageRoi(x.data<float>(), image, channels, h, w, y1, x1, bin_h, bin_w, grid_h, grid_w,
                     1.0 / count, state, y->mutable_data<float>() + r * channels * out_h_ * out_w_);
        } else {
          AverageRoi(x.data<double>(), image, channels, h, w, y1, x1, bin_h, bin_w, grid_h, grid_w,
                     1.0 / count, state,
                     y->mutable_data<double>() + r * channels * out_h_ * out_w_);
        }
        continue;
      }
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t plane = (image * channels + c) * h * w;
        for (int64_t ph = 0; ph < out_h_; ++ph) {
          for (int64_t pw = 0; pw < out_w_; ++pw) {
            double acc = max_ ? -std::numeric_limits<double>::infinity() : 0.0;
            bool any = false;
            for (int64_t iy = 0; iy < grid_h; ++iy) {
              const double sy = y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h;
              for (int64_t ix = 0; ix < grid_w; ++ix) {
                const double sx = x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w;
                double v = 0, vmax = 0;
                Bilinear(x, plane, h, w, sy, sx, &v, &vmax);
                if (max_) {
                  acc = any ? std::max(acc, vmax) : vmax;
                  any = true;
                } else {
                  acc += v;
                }
              }
            }
            const int64_t out = ((r * channels + c) * out_h_ + ph) * out_w_ + pw;
            StoreFloat(*y, out, max_ ? (any ? acc : 0.0) : acc / count);
          }
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  RoiAlignKernel() = default;

  // Mode 'avg' for one roi: out [channels, out_h, out_w].
  template <typename T>
  void AverageRoi(const T* x, int64_t image, int64_t channels, int64_t h, int64_t w, double y1,
                  double x1, double bin_h, double bin_w, int64_t grid_h, int64_t grid_w,
                  double scale, RoiAlignState& state, T* out) const {
    RoiTaps& rows = state.rows;
    RoiTaps& cols = state.cols;
    rows.Build(y1, bin_h, out_h_, grid_h, h);
    cols.Build(x1, bin_w, out_w_, grid_w, w);
    if (rows.index.empty() || cols.index.empty()) {
      std::fill(out, out + channels * out_h_ * out_w_, T(0));
      return;
    }
    // Columns first_col.. the roi touches; per output row, its input rows summed over them (a
    // contiguous, vectorisable loop), then each output takes its column taps from that sum.
    const auto [lo, hi] = std::minmax_element(cols.index.begin(), cols.index.end());
    const int64_t first_col = *lo, num_cols = *hi - *lo + 1;
    std::vector<T>& sums = state.sums(static_cast<T*>(nullptr));
    sums.resize(num_cols);
    T* sum = sums.data();
    for (int64_t c = 0; c < channels; ++c) {
      const T* plane = x + (image * channels + c) * h * w + first_col;
      T* dst = out + c * out_h_ * out_w_;
      for (int64_t ph = 0; ph < out_h_; ++ph) {
        T* line = dst + ph * out_w_;
        if (rows.begin[ph] == rows.begin[ph + 1]) {
          std::fill(line, line + out_w_, T(0));
          continue;
        }
        std::fill(sum, sum + num_cols, T(0));
        for (int64_t t = rows.begin[ph]; t < rows.begin[ph + 1]; ++t) {
          const T weight = static_cast<T>(rows.weight[t] * scale);
          const T* row = plane + rows.index[t] * w;
          for (int64_t i = 0; i < num_cols; ++i) sum[i] += weight * row[i];
        }
        for (int64_t pw = 0; pw < out_w_; ++pw) {
          T acc = 0;
          for (int64_t t = cols.begin[pw]; t < cols.begin[pw + 1]; ++t) {
            acc += static_cast<T>(cols.weight[t]) * sum[cols.index[t] - first_col];
          }
          line[pw] = acc;
        }
      }
    }
  }

  // The bilinear value at (sy, sx) of the plane, and the largest of its weighted corners; both 0
  // outside the image by more than a pixel, and on an empty image.
  static void Bilinear(const Tensor& x, int64_t plane, int64_t h, int64_t w, double sy, double sx,
                       double* value, double* max_corner) {
    *value = *max_corner = 0;
    if (h <= 0 || w <= 0 || !(sy >= -1.0 && sy <= h && sx >= -1.0 && sx <= w)) return;
    sy = std::max(sy, 0.0);
    sx = std::max(sx, 0.0);
    int64_t y0 = static_cast<int64_t>(sy), x0 = static_cast<int64_t>(sx), y1, x1;
    if (y0 >= h - 1) {
      y0 = y1 = h - 1;
      sy = static_cast<double>(y0);
    } else {
      y1 = y0 + 1;
    }
    if (x0 >= w - 1) {
      x0 = x1 = w - 1;
      sx = static_cast<double>(x0);
    } else {
      x1 = x0 + 1;
    }
    const double ly = sy - y0, lx = sx - x0, hy = 1 - ly, hx = 1 - lx;
    const double c[4] = {
        hy * hx * LoadFloat(x, plane + y0 * w + x0), hy * lx * LoadFloat(x, plane + y0 * w + x1),
        ly * hx * LoadFloat(x, plane + y1 * w + x0), ly * lx * LoadFloat(x, plane + y1 * w + x1)};
    *value = c[0] + c[1] + c[2] + c[3];
    *max_corner = std::max(std::max(c[0], c[1]), std::max(c[2], c[3]));
  }

  int64_t out_h_ = 1, out_w_ = 1, sampling_ratio_ = 0;
  float spatial_scale_ = 1.0f;
  bool max_ = false;
  bool half_pixel_ = true;
};

// LpPool(X [N, C, spatial...]; kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, p):
// (sum over the window of |x|^p)^(1/p), padding contributing nothing. One or two spatial axes:
// |x|^p of a whole plane at once (float32: vector math, a product for p = 2), the window sums,
// then the 1/p power of the output (float32: vector math, a square root for p = 2). Three or more
// spatial axes run the reference kernel.
class LpPoolState : public KernelState {
 public:
  std::vector<float> powered_f;  // one plane's |x|^p
  std::vector<double> powered_d;
  std::vector<int64_t> col_begin, col_first;  // per output column: first input column, first tap
  std::vector<int64_t> col_end;               // per output column: one past its last tap
  std::vector<float>& powered(float*) { return powered_f; }
  std::vector<double>& powered(double*) { return powered_d; }
};

class LpPoolKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    const Node& node = init.node();
    auto kernel = std::unique_ptr<LpPoolKernel>(new LpPoolKernel());
    kernel->attrs_.kind = reference::PoolKind::kLp;
    LS_ASSIGN_OR_RETURN(kernel->attrs_.window,
                        ParseWindowAttrs(node, /*require_kernel_shape=*/true));
    // p is a float in LpPool-1 and an int from LpPool-2 on.
    const Attribute* p = node.FindAttribute("p");
    if (p != nullptr) {
      kernel->attrs_.p = p->type == Attribute::Type::kFloat ? p->f : static_cast<float>(p->i);
    }
    if (!(kernel->attrs_.p > 0) || kernel->attrs_.p > 1e6f) {
      return absl::InvalidArgumentError(absl::StrCat("p ", kernel->attrs_.p, " must be positive"));
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<LpPoolState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (!IsFloatingPoint(x.dtype()) || (x.rank() != 3 && x.rank() != 4)) {
      return reference::Pool(x, attrs_, ctx.output_value(0).mutable_tensor(), nullptr);
    }
    LS_ASSIGN_OR_RETURN(const reference::Window win,
                        reference::ResolveWindow(x.shape(), attrs_.window.kernel_shape,
                                                 attrs_.window, /*pool=*/true, "LpPool"));
    // One spatial axis is the columns of a single-row plane.
    const bool two_d = win.rank == 2;
    const int col = two_d ? 1 : 0;
    const Axis rows = two_d ? Axis{win.input[0],   win.output[0],    win.kernel[0],
                                   win.strides[0], win.dilations[0], win.pads_begin[0]}
                            : Axis{1, 1, 1, 1, 1, 0};
    const Axis cols{win.input[col],   win.output[col],    win.kernel[col],
                    win.strides[col], win.dilations[col], win.pads_begin[col]};
    Shape::Dims dims = {x.dim(0), x.dim(1)};
    dims.insert(dims.end(), win.output.begin(), win.output.end());
    LS_ASSIGN_OR_RETURN(const Shape out_shape, ValidateDims(dims, "pool output"));
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    if (y->NumElements() == 0) return absl::OkStatus();
    LpPoolState& state = *ctx.state<LpPoolState>();
    state.col_begin.resize(cols.out);
    state.col_first.resize(cols.out);
    state.col_end.resize(cols.out);
    for (int64_t ow = 0; ow < cols.out; ++ow) {
      const int64_t begin = ow * cols.stride - cols.pad;
      state.col_begin[ow] = begin;
      TapRange(begin, cols, &state.col_first[ow], &state.col_end[ow]);
    }
    const int64_t planes = x.dim(0) * x.dim(1);
    if (x.dtype() == DataType::kFloat32) {
      Pool(x.data<float>(), planes, rows, cols, state, y->mutable_data<float>());
    } else {
      Pool(x.data<double>(), planes, rows, cols, state, y->mutable_data<double>());
    }
    return absl::OkStatus();
  }

 private:
  // One spatial axis of the window.
  struct Axis {
    int64_t in, out, kernel, stride, dilation, pad;
  };

  LpPoolKernel() = default;

  // The taps k < kernel whose input position begin + k * dilation lies in [0, in): [*first, *end).
  static void TapRange(int64_t begin, const Axis& a, int64_t* first, int64_t* end) {
    *first = begin >= 0 ? 0 : (-begin + a.dilation - 1) / a.dilation;
    *end = begin >= a.in ? 0 : std::min(a.kernel, (a.in - begin + a.dilation - 1) / a.dilation);
    if (*end < *first) *end = *first;
  }

  // powered[i] = |in[i]|^p, and values[i] = values[i]^(1 / p).
  static void Power(const float* in, float p, int64_t n, float* powered) {
    if (p == 2.0f) {
      for (int64_t i = 0; i < n; ++i) powered[i] = in[i] * in[i];
    } else {
      UnaryF32(VecUnary::kAbs, in, powered, n);
      if (p != 1.0f) UnaryF32(VecUnary::kPow, powered, powered, n, p);
    }
  }
  static void Power(const double* in, float p, int64_t n, double* powered) {
    for (int64_t i = 0; i < n; ++i) powered[i] = std::pow(std::fabs(in[i]), double{p});
  }
  static void Root(float p, int64_t n, float* values) {
    if (p == 2.0f) {
      UnaryF32(VecUnary::kSqrt, values, values, n);
    } else if (p != 1.0f) {
      UnaryF32(VecUnary::kPow, values, values, n, 1.0f / p);
    }
  }
  static void Root(float p, int64_t n, double* values) {
    for (int64_t i = 0; i < n; ++i) values[i] = std::pow(values[i], 1.0 / double{p});
  }

  template <typename T>
  void Pool(const T* x, int64_t planes, const Axis& rows, const Axis& cols, LpPoolState& state,
            T* y) const {
    const int64_t plane_size = rows.in * cols.in;
    std::vector<T>& buffer = state.powered(static_cast<T*>(nullptr));
    buffer.resize(plane_size);
    T* powered = buffer.data();
    for (int64_t plane = 0; plane < planes; ++plane) {
      Power(x + plane * plane_size, attrs_.p, plane_size, powered);
      T* out = y + plane * rows.out * cols.out;
      for (int64_t oh = 0; oh < rows.out; ++oh) {
        const int64_t row_begin = oh * rows.stride - rows.pad;
        int64_t first = 0, end = 0;
        TapRange(row_begin, rows, &first, &end);
        T* line = out + oh * cols.out;
        std::fill(line, line + cols.out, T(0));
        for (int64_t kh = first; kh < end; ++kh) {
          const T* row = powered + (row_begin + kh * rows.dilation) * cols.in;
          for (int64_t ow = 0; ow < cols.out; ++ow) {
            const T* at = row + state.col_begin[ow];
            T acc = 0;
            for (int64_t kw = state.col_first[ow]; kw < state.col_end[ow]; ++kw) {
              acc += at[kw * cols.dilation];
            }
            line[ow] += acc;
          }
        }
      }
      Root(attrs_.p, rows.out * cols.out, out);
    }
  }

  reference::PoolAttrs attrs_;
};

}  // namespace

void RegisterPoolingExtraKernels(KernelRegistry& registry) {
  registry.Register("MeanVarianceNormalization", FactoryOf<MvnKernel>(), 9);
  registry.Register("MaxUnpool", FactoryOf<MaxUnpoolKernel>(), 9);
  registry.Register("RoiAlign", FactoryOf<RoiAlignKernel>(), 10);
  registry.Register("LpPool", FactoryOf<LpPoolKernel>());
}

}  // namespace loopserve::engine::native
