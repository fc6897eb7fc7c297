// oneDNN BatchNormalization (inference and opset-14 training mode), InstanceNormalization,
// LayerNormalization and LRN.

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/kernels/native/vector_math.h"

// `#pragma omp simd` below is a hint: clang at the sanitizer build's -O1 does not vectorize and
// would report each loop as a failed transformation (an error under -Werror).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

namespace loopserve::engine {
namespace {

// The statistics and scale/shift of oneDNN's normalizations are f32 whatever the data type, so
// these kernels use oneDNN for f32 only.
bool IsFloat32(DataType type) { return type == DataType::kFloat32; }

std::unique_ptr<PreparedOp> Mode(PreparedOp::Mode mode, const Shape& out) {
  auto prepared = std::make_unique<PreparedOp>();
  prepared->mode = mode;
  prepared->output_shape = out;
  return prepared;
}

// Training mode (opset 14+): the statistics of the batch (mean and biased variance over N and
// the spatial dims) normalise X, and the running statistics come out as
// input * momentum + batch * (1 - momentum).
struct BatchNormTraining {
  bool enabled = false;
  float momentum = 0.9f;
  int outputs = 1;  // 1 to 3: Y, running_mean, running_var
};

// The reference of training mode, in double: y and the running statistics.
absl::Status BatchNormTrainingReference(const Tensor& x, const Tensor& scale, const Tensor& bias,
                                        const Tensor& mean, const Tensor& var, float epsilon,
                                        float momentum, Tensor& y, Tensor* running_mean,
                                        Tensor* running_var) {
  if (!IsFloatingPoint(x.dtype()) || x.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("BatchNormalization training: input ",
                                                   x.DebugString(4), " is not float of rank >= 2"));
  }
  const int64_t n = x.dim(0), c = x.dim(1), spatial = x.shape().NumElements(2, x.rank());
  for (const Tensor* t : {&scale, &bias, &mean, &var}) {
    if (t->dtype() != x.dtype() || t->NumElements() != c) {
      return absl::InvalidArgumentError(absl::StrCat("BatchNormalization: scale, B, mean and var ",
                                                     "must have ", c,
                                                     " elements of the input's "
                                                     "type, got ",
                                                     t->DebugString(4)));
    }
  }
  y.Resize(x.dtype(), x.shape());
  if (running_mean != nullptr) running_mean->Resize(x.dtype(), Shape{c});
  if (running_var != nullptr) running_var->Resize(x.dtype(), Shape{c});
  auto at = [](const Tensor& t, int64_t i) {
    return t.dtype() == DataType::kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
  };
  auto put = [](Tensor& t, int64_t i, double v) {
    if (t.dtype() == DataType::kFloat32) {
      t.mutable_data<float>()[i] = static_cast<float>(v);
    } else {
      t.mutable_data<double>()[i] = v;
    }
  };
  const double count = static_cast<double>(n * spatial);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t s = 0; s < spatial; ++s) sum += at(x, (b * c + ch) * spatial + s);
    }
    const double m = count > 0 ? sum / count : 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t s = 0; s < spatial; ++s) {
        const double d = at(x, (b * c + ch) * spatial + s) - m;
        sq += d * d;
      }
    }
    const double v = count > 0 ? sq / count : 0;
    const double inv = 1.0 / std::sqrt(v + epsilon);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t s = 0; s < spatial; ++s) {
        const int64_t i = (b * c + ch) * spatial + s;
        put(y, i, at(scale, ch) * (at(x, i) - m) * inv + at(bias, ch));
      }
    }
    if (running_mean != nullptr)
      put(*running_mean, ch, at(mean, ch) * momentum + m * (1 - momentum));
    if (running_var != nullptr) put(*running_var, ch, at(var, ch) * momentum + v * (1 - momentum));
  }
  return absl::OkStatus();
}

class BatchNormKernel final : public DnnlKernel {
 public:
  BatchNormKernel(float epsilon, BatchNormTraining training)
      : DnnlKernel(/*num_inputs=*/5, /*required_inputs=*/5),
        epsilon_(epsilon),
        training_(training) {}

 protected:
  bool UsesDnnl(DataType type) const override { return IsFloat32(type); }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    const Shape& x = *shapes[0];
    if (x.rank() < 2) {
      return absl::InvalidArgumentError(absl::StrCat("BatchNormalization: input of shape ",
                                                     x.ToString(), " must have rank >= 2"));
    }
    const int64_t channels = x[1];
    const int64_t spatial = x.NumElements(2, x.rank());
    const int64_t stats = shapes[1]->NumElements();
    for (int i = 1; i < 5; ++i) {
      if (shapes[i]->NumElements() != stats || (stats != channels && stats != channels * spatial)) {
        return absl::InvalidArgumentError(
            absl::StrCat("BatchNormalization: scale, B, mean and var must have ", channels,
                         " elements (the input's channels), got ", shapes[i]->ToString()));
      }
    }
    if (x.NumElements() == 0) return Mode(PreparedOp::Mode::kEmpty, x);
    // The opset < 9 spatial = 0 form (per-element statistics) is the reference's.
    if (stats != channels) return Mode(PreparedOp::Mode::kReference, x);
    if (training_.enabled) {
      // The primitive writes the batch statistics into outputs 1 and 2: a node without them
      // runs the reference.
      if (training_.outputs < 3) return Mode(PreparedOp::Mode::kReference, x);
      return PrepareTraining(type, x);
    }
    // Inference is y = x * a + b per channel, with a = scale / sqrt(var + epsilon) and
    // b = B - mean * a: one native vector pass per plane. oneDNN 2.6 has no optimized inference
    // batch norm on plain layouts of rank 3 (bnorm_ref: 6.1 ms for 1x96x3136) and its ncsp one
    // for rank 4 is 3x slower than this pass (383 us against 122 us, one thread, Zen 4).
    auto prepared = Mode(PreparedOp::Mode::kNativeCustom, x);
    prepared->native_dims[0] = x[0];
    prepared->native_dims[1] = channels;
    prepared->native_dims[2] = spatial;
    return prepared;
  }

  // Multiply-adds over the input: decides whether RunNative splits its planes over threads.
  int64_t Work(absl::Span<const Shape* const> shapes) const override {
    return shapes[0]->NumElements();
  }

  absl::Status RunNative(const PreparedOp& op, const Tensor* const* inputs,
                         Tensor& out) const override {
    const int64_t batch = op.native_dims[0];
    const int64_t channels = op.native_dims[1];
    const int64_t spatial = op.native_dims[2];
    const float* x = inputs[0]->data<float>();
    const float* scale = inputs[1]->data<float>();
    const float* bias = inputs[2]->data<float>();
    const float* mean = inputs[3]->data<float>();
    const float* var = inputs[4]->data<float>();
    float* y = out.mutable_data<float>();
    const float epsilon = epsilon_;
    if (spatial < kMinPlane) {
      // Short planes (rank 2 [N, C]: one element each): per block of channels, a and b laid out
      // over the block's elements of a sample (on the stack: no allocation), then y = x * a + b
      // for every sample.
      const int64_t sample = channels * spatial;
      const int64_t block_channels = kBlockElements / spatial;
      const int64_t blocks = (channels + block_channels - 1) / block_channels;
#pragma omp parallel for schedule(static) if (!op.single_threaded)
      for (int64_t k = 0; k < blocks; ++k) {
        const int64_t c0 = k * block_channels;
        const int64_t cn = std::min(block_channels, channels - c0), len = cn * spatial;
        float a[kBlockElements], b[kBlockElements];
        for (int64_t c = 0; c < cn; ++c) {
          const float ac = scale[c0 + c] / std::sqrt(var[c0 + c] + epsilon);
          std::fill_n(a + c * spatial, spatial, ac);
          std::fill_n(b + c * spatial, spatial, bias[c0 + c] - mean[c0 + c] * ac);
        }
        for (int64_t n = 0; n < batch; ++n) {
          const float* in = x + n * sample + c0 * spatial;
          float* o = y + n * sample + c0 * spatial;
#pragma omp simd
          for (int64_t i = 0; i < len; ++i) o[i] = in[i] * a[i] + b[i];
        }
      }
      return absl::OkStatus();
    }
    const int64_t planes = batch * channels;
#pragma omp parallel for schedule(static) if (!op.single_threaded)
    for (int64_t p = 0; p < planes; ++p) {
      const int64_t c = p % channels;
      const float a = scale[c] / std::sqrt(var[c] + epsilon);
      const float b = bias[c] - mean[c] * a;
      native::UnaryF32(native::VecUnary::kLinear, x + p * spatial, y + p * spatial, spatial, a, b);
    }
    return absl::OkStatus();
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    if (training_.enabled) {
      return BatchNormTrainingReference(
          ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3), ctx.input(4), epsilon_,
          training_.momentum, ctx.output_value(0).mutable_tensor(),
          training_.outputs > 1 ? &ctx.output_value(1).mutable_tensor() : nullptr,
          training_.outputs > 2 ? &ctx.output_value(2).mutable_tensor() : nullptr);
    }
    return reference::BatchNorm(ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3),
                                ctx.input(4), epsilon_, ctx.output_value(0).mutable_tensor());
  }

  // The running statistics from the batch's (written into outputs 1 and 2 by the primitive).
  absl::Status Finish(const PreparedOp& /*op*/, KernelContext& ctx) const override {
    if (!training_.enabled) return absl::OkStatus();
    const float m = training_.momentum;
    for (int k = 1; k <= 2; ++k) {
      Tensor& out = ctx.output_value(k).mutable_tensor();
      const float* in = ctx.input(2 + k).data<float>();
      float* v = out.mutable_data<float>();
      for (int64_t i = 0; i < out.NumElements(); ++i) v[i] = in[i] * m + v[i] * (1 - m);
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::unique_ptr<PreparedOp>> PrepareTraining(DataType type, const Shape& x) const {
    auto prepared = Mode(PreparedOp::Mode::kExecute, x);
    const int64_t channels = x[1];
    // Rank 4 ([N, C, spatial, 1]): oneDNN 2.6 has only its reference for plain rank 3.
    const dnnl::memory::desc data = Desc({x[0], channels, x.NumElements(2, x.rank()), 1}, type);
    const dnnl::memory::desc vec = Desc({channels}, type);
    const dnnl::batch_normalization_forward::primitive_desc pd(
        dnnl::batch_normalization_forward::desc(
            dnnl::prop_kind::forward_training, data, epsilon_,
            dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift),
        UserScratchpadAttr(), CpuEngine());
    prepared->primitive = dnnl::batch_normalization_forward(pd);
    // The batch statistics land in outputs 1 and 2 and Finish turns them into the running ones
    // (an omitted output is a scratch slot).
    prepared->extra_outputs = {{type, Shape{channels}}, {type, Shape{channels}}};
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, data},
                          {DNNL_ARG_SCALE, BufferSource::kInput1, vec},
                          {DNNL_ARG_SHIFT, BufferSource::kInput2, vec},
                          {DNNL_ARG_MEAN, BufferSource::kOutput1, vec},
                          {DNNL_ARG_VARIANCE, BufferSource::kOutput2, vec},
                          {DNNL_ARG_DST, BufferSource::kOutput, data}};
    if (pd.workspace_desc().get_size() > 0) {
      return Mode(PreparedOp::Mode::kReference, x);  // no workspace without fused ReLU
    }
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  static constexpr int64_t kMinPlane = 16;         // shorter planes take the per-sample pass
  static constexpr int64_t kBlockElements = 1024;  // its a and b, floats each (>= kMinPlane)
  const float epsilon_;
  const BatchNormTraining training_;
};

class InstanceNormKernel final : public DnnlKernel {
 public:
  explicit InstanceNormKernel(float epsilon)
      : DnnlKernel(/*num_inputs=*/3, /*required_inputs=*/3), epsilon_(epsilon) {}

 protected:
  bool UsesDnnl(DataType type) const override { return IsFloat32(type); }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    const Shape& x = *shapes[0];
    if (x.rank() < 3) {
      return absl::InvalidArgumentError(absl::StrCat("InstanceNormalization: input of shape ",
                                                     x.ToString(), " must have rank >= 3"));
    }
    const int64_t channels = x[1];
    if (shapes[1]->rank() != 1 || (*shapes[1])[0] != channels || *shapes[2] != *shapes[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("InstanceNormalization: scale ", shapes[1]->ToString(), " and B ",
                       shapes[2]->ToString(), " must both be [", channels, "]"));
    }
    if (x.NumElements() == 0) return Mode(PreparedOp::Mode::kEmpty, x);
    // Per plane (n, c): mean, centre, variance of the centred plane (two passes, as oneDNN
    // computes it), then one scale-and-shift pass. oneDNN 2.6 would run it as a batch norm with
    // batch statistics over N * C channels, which it has only as bnorm_ref on plain layouts.
    auto prepared = Mode(PreparedOp::Mode::kNativeCustom, x);
    prepared->native_dims[0] = x[0];
    prepared->native_dims[1] = channels;
    prepared->native_dims[2] = x.NumElements(2, x.rank());
    return prepared;
  }

  int64_t Work(absl::Span<const Shape* const> shapes) const override {
    return 3 * shapes[0]->NumElements();
  }

  absl::Status RunNative(const PreparedOp& op, const Tensor* const* inputs,
                         Tensor& out) const override {
    const int64_t channels = op.native_dims[1];
    const int64_t spatial = op.native_dims[2];
    const int64_t planes = op.native_dims[0] * channels;
    const float* x = inputs[0]->data<float>();
    const float* scale = inputs[1]->data<float>();
    const float* bias = inputs[2]->data<float>();
    float* y = out.mutable_data<float>();
    const float inv_n = 1.0f / static_cast<float>(spatial);
    const float epsilon = epsilon_;
#pragma omp parallel for schedule(static) if (!op.single_threaded)
    for (int64_t p = 0; p < planes; ++p) {
      const int64_t c = p % channels;
      const float* xp = x + p * spatial;
      float* yp = y + p * spatial;
      const float mean = native::SumF32(xp, spatial) * inv_n;
      native::UnaryF32(native::VecUnary::kLinear, xp, yp, spatial, 1.0f, -mean);
      const float rstd = 1.0f / std::sqrt(native::DotF32(yp, yp, spatial) * inv_n + epsilon);
      native::UnaryF32(native::VecUnary::kLinear, yp, yp, spatial, rstd * scale[c], bias[c]);
    }
    return absl::OkStatus();
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    return reference::InstanceNorm(ctx.input(0), ctx.input(1), ctx.input(2), epsilon_,
                                   ctx.output_value(0).mutable_tensor());
  }

 private:
  const float epsilon_;
};

class LayerNormKernel final : public DnnlKernel {
 public:
  LayerNormKernel(int64_t axis, float epsilon, int num_stats)
      : DnnlKernel(/*num_inputs=*/3, /*required_inputs=*/2),
        axis_(axis),
        epsilon_(epsilon),
        num_stats_(num_stats) {}

 protected:
  // With Mean alone, oneDNN's variance would have nowhere to go.
  bool UsesDnnl(DataType type) const override { return IsFloat32(type) && num_stats_ != 1; }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    const Shape& x = *shapes[0];
    LS_ASSIGN_OR_RETURN(const reference::LayerNormDims dims, reference::LayerNormShapes(x, axis_));
    const Shape normalized(x.dims().subspan(dims.axis));
    for (int i = 1; i < 3; ++i) {
      if (shapes[i] == nullptr) continue;
      absl::StatusOr<Shape> b = BroadcastShapes(normalized, *shapes[i]);
      if (!b.ok() || *b != normalized) {
        return absl::InvalidArgumentError(absl::StrCat(
            "LayerNormalization: ", i == 1 ? "scale" : "B", " of shape ", shapes[i]->ToString(),
            " does not broadcast onto the normalized dims ", normalized.ToString()));
      }
    }
    auto prepared = Mode(PreparedOp::Mode::kExecute, x);
    for (int k = 0; k < num_stats_; ++k) {
      prepared->extra_outputs.push_back({DataType::kFloat32, dims.stats});
    }
    if (x.NumElements() == 0) {
      // Statistics of empty rows are NaN, not nothing.
      prepared->mode = dims.outer == 0 ? PreparedOp::Mode::kEmpty : PreparedOp::Mode::kReference;
      return prepared;
    }
    // Small rows with whole-row scale and bias (a decoder's or a residual block's [1, 256]): native
    // vector passes per row (mean, centre, variance, scale, shift), with no oneDNN execute (its
    // argument map and heap allocations per call cost more than the arithmetic: 9% of
    // mlp_b1_h256's time).
    const auto whole_row = [&](int i) {
      return shapes[i] == nullptr ? i == 2 : shapes[i]->NumElements() == dims.inner;
    };
    if (type == DataType::kFloat32 && num_stats_ == 0 && whole_row(1) && whole_row(2) &&
        x.NumElements() <= NativeElementwiseLimit()) {
      prepared->mode = PreparedOp::Mode::kNativeCustom;
      prepared->native_dims[0] = dims.outer;
      prepared->native_dims[1] = dims.inner;
      return prepared;
    }
    const dnnl::memory::desc data = Desc({dims.outer, dims.inner}, type);
    const dnnl::memory::desc vec = Desc({dims.inner}, type);
    const dnnl::memory::desc stat = Desc({dims.outer}, DataType::kFloat32);
    dnnl::normalization_flags flags = dnnl::normalization_flags::use_scale;
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, data},
                          {DNNL_ARG_DST, BufferSource::kOutput, data}};
    for (int i = 1; i < 3; ++i) {
      if (shapes[i] == nullptr) continue;
      BufferSource source = i == 1 ? BufferSource::kInput1 : BufferSource::kInput2;
      if (shapes[i]->NumElements() != dims.inner) {
        // Broadcast along some normalised dims: expand to the full normalised shape first.
        source = prepared->expansions.empty() ? BufferSource::kAux0 : BufferSource::kAux1;
        prepared->expansions.push_back({i, normalized});
      }
      prepared->bindings.push_back({i == 1 ? DNNL_ARG_SCALE : DNNL_ARG_SHIFT, source, vec});
    }
    if (shapes[2] != nullptr) flags = flags | dnnl::normalization_flags::use_shift;
    // Training mode is what makes oneDNN write the mean and variance; Finish turns the variance
    // into 1 / sqrt(variance + epsilon).
    const bool stats = num_stats_ > 0;
    if (stats) {
      prepared->bindings.push_back({DNNL_ARG_MEAN, BufferSource::kOutput1, stat});
      prepared->bindings.push_back({DNNL_ARG_VARIANCE, BufferSource::kOutput2, stat});
    }
    const dnnl::layer_normalization_forward::primitive_desc pd(
        dnnl::layer_normalization_forward::desc(
            stats ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, data,
            stat, epsilon_, flags),
        UserScratchpadAttr(), CpuEngine());
    prepared->primitive = dnnl::layer_normalization_forward(pd);
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  absl::Status Finish(const PreparedOp& /*op*/, KernelContext& ctx) const override {
    if (num_stats_ < 2) return absl::OkStatus();
    Tensor& var = ctx.output_value(2).mutable_tensor();
    float* v = var.mutable_data<float>();
    for (int64_t i = 0; i < var.NumElements(); ++i) v[i] = 1.0f / std::sqrt(v[i] + epsilon_);
    return absl::OkStatus();
  }

  absl::Status RunNative(const PreparedOp& op, const Tensor* const* inputs,
                         Tensor& out) const override {
    const int64_t rows = op.native_dims[0];
    const int64_t n = op.native_dims[1];
    const float* x = inputs[0]->data<float>();
    const float* scale = inputs[1]->data<float>();
    const float* shift = inputs[2] != nullptr ? inputs[2]->data<float>() : nullptr;
    float* y = out.mutable_data<float>();
    const float inv_n = 1.0f / static_cast<float>(n);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      // Two passes for the variance (of the centred row), as oneDNN computes it.
      const float mean = native::SumF32(xr, n) * inv_n;
      native::UnaryF32(native::VecUnary::kLinear, xr, yr, n, 1.0f, -mean);
      const float rstd = 1.0f / std::sqrt(native::DotF32(yr, yr, n) * inv_n + epsilon_);
      native::UnaryF32(native::VecUnary::kLinear, yr, yr, n, rstd, 0.0f);
      native::BinaryF32(native::VecBinary::kMul, yr, 1, scale, 1, yr, n);
      if (shift != nullptr) native::BinaryF32(native::VecBinary::kAdd, yr, 1, shift, 1, yr, n);
    }
    return absl::OkStatus();
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    return reference::LayerNorm(ctx.input(0), ctx.input(1),
                                ctx.has_input(2) ? &ctx.input(2) : nullptr, axis_, epsilon_,
                                DataType::kFloat32, ctx.output_value(0).mutable_tensor(),
                                num_stats_ > 0 ? &ctx.output_value(1).mutable_tensor() : nullptr,
                                num_stats_ > 1 ? &ctx.output_value(2).mutable_tensor() : nullptr);
  }

 private:
  const int64_t axis_;
  const float epsilon_;
  // The statistics outputs written: 0, 1 (Mean) or 2 (Mean and InvStdDev, either may be omitted).
  const int num_stats_;
};

class LrnKernel final : public DnnlKernel {
 public:
  LrnKernel(int64_t size, float alpha, float beta, float bias)
      : DnnlKernel(/*num_inputs=*/1, /*required_inputs=*/1),
        size_(size),
        alpha_(alpha),
        beta_(beta),
        bias_(bias) {}

 protected:
  bool UsesDnnl(DataType type) const override { return IsFloat32(type); }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    const Shape& x = *shapes[0];
    if (x.rank() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("LRN: input of shape ", x.ToString(), " must have rank >= 2"));
    }
    if (x.NumElements() == 0) return Mode(PreparedOp::Mode::kEmpty, x);
    // oneDNN's window is symmetric: an even size is the reference's.
    if (size_ % 2 == 0) return Mode(PreparedOp::Mode::kReference, x);
    auto prepared = Mode(PreparedOp::Mode::kExecute, x);
    const dnnl::memory::desc data = Desc({x[0], x[1], x.NumElements(2, x.rank()), 1}, type);
    const dnnl::lrn_forward::primitive_desc pd(
        dnnl::lrn_forward::desc(dnnl::prop_kind::forward_inference,
                                dnnl::algorithm::lrn_across_channels, data, size_, alpha_, beta_,
                                bias_),
        UserScratchpadAttr(), CpuEngine());
    prepared->primitive = dnnl::lrn_forward(pd);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, data},
                          {DNNL_ARG_DST, BufferSource::kOutput, data}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    return reference::Lrn(ctx.input(0), size_, alpha_, beta_, bias_,
                          ctx.output_value(0).mutable_tensor());
  }

 private:
  const int64_t size_;
  const float alpha_;
  const float beta_;
  const float bias_;
};

absl::Status CheckEpsilon(float epsilon) {
  if (!(epsilon >= 0) || std::isinf(epsilon)) {
    return absl::InvalidArgumentError(absl::StrCat("epsilon ", epsilon, " must be >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlBatchNormKernel(const KernelInit& init) {
  const Node& node = init.node();
  if (init.num_inputs() != 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected 5 inputs (X, scale, B, mean, var), got ", init.num_inputs()));
  }
  LS_ASSIGN_OR_RETURN(const int64_t training_mode, node.GetInt("training_mode", 0));
  bool training = training_mode != 0;
  for (size_t i = 1; i < node.outputs.size(); ++i) training |= node.outputs[i] != kNoValue;
  if (node.opset < 7) {
    LS_ASSIGN_OR_RETURN(const int64_t is_test, node.GetInt("is_test", 0));
    training |= is_test == 0 && node.outputs.size() > 1;
  }
  BatchNormTraining train;
  if (training) {
    // Opset 14's form (Y, running_mean, running_var); the older saved-statistics outputs are not.
    if (node.opset < 14 || training_mode == 0 || node.outputs.size() > 3) {
      return absl::UnimplementedError(
          "BatchNormalization training statistics outputs are supported from opset 14 with "
          "training_mode=1 (Y, running_mean, running_var)");
    }
    train.enabled = true;
    LS_ASSIGN_OR_RETURN(train.momentum, node.GetFloat("momentum", 0.9f));
    train.outputs = static_cast<int>(node.outputs.size());
  }
  LS_ASSIGN_OR_RETURN(const float epsilon, node.GetFloat("epsilon", 1e-5f));
  LS_RETURN_IF_ERROR(CheckEpsilon(epsilon));
  auto kernel = std::make_unique<BatchNormKernel>(epsilon, train);
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlInstanceNormKernel(const KernelInit& init) {
  if (init.num_inputs() != 3 || init.node().outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 3 inputs and 1 output, got ",
                                                   init.num_inputs(), " and ",
                                                   init.node().outputs.size()));
  }
  LS_ASSIGN_OR_RETURN(const float epsilon, init.node().GetFloat("epsilon", 1e-5f));
  LS_RETURN_IF_ERROR(CheckEpsilon(epsilon));
  auto kernel = std::make_unique<InstanceNormKernel>(epsilon);
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlLayerNormKernel(const KernelInit& init) {
  const Node& node = init.node();
  if (init.num_inputs() < 2 || init.num_inputs() > 3 || node.outputs.empty() ||
      node.outputs.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected 2 or 3 inputs and 1 to 3 outputs, got ", init.num_inputs(), " and ",
                     node.outputs.size()));
  }
  LS_ASSIGN_OR_RETURN(const int64_t axis, node.GetInt("axis", -1));
  LS_ASSIGN_OR_RETURN(const float epsilon, node.GetFloat("epsilon", 1e-5f));
  LS_RETURN_IF_ERROR(CheckEpsilon(epsilon));
  LS_ASSIGN_OR_RETURN(const int64_t stash_type, node.GetInt("stash_type", 1));
  if (stash_type != 1) {
    return absl::UnimplementedError(
        absl::StrCat("LayerNormalization stash_type ", stash_type, " (only 1, float)"));
  }
  int num_stats = 0;
  for (size_t i = 1; i < node.outputs.size(); ++i) {
    if (node.outputs[i] != kNoValue) num_stats = static_cast<int>(node.outputs.size()) - 1;
  }
  auto kernel = std::make_unique<LayerNormKernel>(axis, epsilon, num_stats);
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlLrnKernel(const KernelInit& init) {
  const Node& node = init.node();
  if (init.num_inputs() != 1 || node.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected 1 input and 1 output, got ", init.num_inputs(), " and ", node.outputs.size()));
  }
  LS_ASSIGN_OR_RETURN(const int64_t size, node.GetInt("size", std::nullopt));
  if (size < 1 || size > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("size ", size, " must be in [1, 2^20]"));
  }
  LS_ASSIGN_OR_RETURN(const float alpha, node.GetFloat("alpha", 1e-4f));
  LS_ASSIGN_OR_RETURN(const float beta, node.GetFloat("beta", 0.75f));
  LS_ASSIGN_OR_RETURN(const float bias, node.GetFloat("bias", 1.0f));
  auto kernel = std::make_unique<LrnKernel>(size, alpha, beta, bias);
  kernel->WarmUp(init);
  return kernel;
}

}  // namespace loopserve::engine
