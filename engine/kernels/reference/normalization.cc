// Reference BatchNormalization, InstanceNormalization, LayerNormalization and LRN; see
// reference.h.

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/reference/broadcast.h"
#include "engine/kernels/reference/reference.h"
#include "engine/tensor/dtype.h"

namespace loopserve::engine::reference {
namespace {

absl::Status CheckFloat(absl::string_view op, std::initializer_list<const Tensor*> tensors) {
  const DataType type = (*tensors.begin())->dtype();
  if (!IsFloatingPoint(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " does not support element type ", DataTypeName(type)));
  }
  for (const Tensor* t : tensors) {
    if (t != nullptr && t->dtype() != type) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": inputs have element types ",
                                                     DataTypeName(type), " and ",
                                                     DataTypeName(t->dtype())));
    }
  }
  return absl::OkStatus();
}

// Calls fn(TypeTag<T>) for float or double.
template <typename Fn>
void DispatchFloat(DataType type, Fn&& fn) {
  if (type == DataType::kFloat64) {
    fn(TypeTag<double>{});
  } else {
    fn(TypeTag<float>{});
  }
}

// Element r of a float32 or float64 statistics tensor (none when `t` is null).
void StoreStat(Tensor* t, int64_t r, double v) {
  if (t == nullptr) return;
  if (t->dtype() == DataType::kFloat64) {
    t->mutable_data<double>()[r] = v;
  } else {
    t->mutable_data<float>()[r] = static_cast<float>(v);
  }
}

}  // namespace

absl::StatusOr<LayerNormDims> LayerNormShapes(const Shape& x, int64_t axis) {
  LayerNormDims dims;
  absl::StatusOr<int> normalized = NormalizeAxis(axis, x.rank());
  if (!normalized.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormalization: axis ", axis,
                                                   " is out of range for input ", x.ToString()));
  }
  dims.axis = *normalized;
  dims.outer = x.NumElements(0, dims.axis);
  dims.inner = x.NumElements(dims.axis, x.rank());
  Shape::Dims stats(x.dims().begin(), x.dims().end());
  for (int i = dims.axis; i < x.rank(); ++i) stats[i] = 1;
  dims.stats = Shape(std::move(stats));
  return dims;
}

absl::Status BatchNorm(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean,
                       const Tensor& var, float epsilon, Tensor& out) {
  LS_RETURN_IF_ERROR(CheckFloat("BatchNormalization", {&x, &scale, &bias, &mean, &var}));
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("BatchNormalization: input of shape ",
                                                   x.shape().ToString(), " must have rank >= 2"));
  }
  const int64_t channels = x.dim(1);
  const int64_t spatial = x.shape().NumElements(2, x.rank());
  const int64_t stats = scale.NumElements();
  if (stats != channels && stats != channels * spatial) {
    return absl::InvalidArgumentError(
        absl::StrCat("BatchNormalization: scale of shape ", scale.shape().ToString(),
                     " does not match ", channels, " channels of input ", x.shape().ToString()));
  }
  for (const Tensor* t : {&bias, &mean, &var}) {
    if (t->NumElements() != stats) {
      return absl::InvalidArgumentError(
          absl::StrCat("BatchNormalization: scale, B, mean and var must have the same size; got ",
                       scale.shape().ToString(), " and ", t->shape().ToString()));
    }
  }
  DispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    out.Resize(x.dtype(), x.shape());
    const T* px = x.data<T>();
    T* po = out.mutable_data<T>();
    const int64_t batch = x.dim(0);
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t c = 0; c < channels; ++c) {
        for (int64_t s = 0; s < spatial; ++s) {
          const int64_t i = (n * channels + c) * spatial + s;
          const int64_t k = stats == channels ? c : c * spatial + s;
          const double inv = 1.0 / std::sqrt(static_cast<double>(var.data<T>()[k]) + epsilon);
          po[i] = static_cast<T>(scale.data<T>()[k] * (px[i] - mean.data<T>()[k]) * inv +
                                 bias.data<T>()[k]);
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status InstanceNorm(const Tensor& x, const Tensor& scale, const Tensor& bias, float epsilon,
                          Tensor& out) {
  LS_RETURN_IF_ERROR(CheckFloat("InstanceNormalization", {&x, &scale, &bias}));
  if (x.rank() < 3) {
    return absl::InvalidArgumentError(absl::StrCat("InstanceNormalization: input of shape ",
                                                   x.shape().ToString(), " must have rank >= 3"));
  }
  const int64_t channels = x.dim(1);
  if (scale.rank() != 1 || scale.dim(0) != channels || bias.shape() != scale.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("InstanceNormalization: scale ", scale.shape().ToString(), " and B ",
                     bias.shape().ToString(), " must both be [", channels, "]"));
  }
  DispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    out.Resize(x.dtype(), x.shape());
    const int64_t spatial = x.shape().NumElements(2, x.rank());
    const int64_t planes = x.dim(0) * channels;
    for (int64_t p = 0; p < planes; ++p) {
      const T* in = x.data<T>() + p * spatial;
      T* o = out.mutable_data<T>() + p * spatial;
      double mean = 0;
      for (int64_t s = 0; s < spatial; ++s) mean += in[s];
      mean /= static_cast<double>(spatial);
      double var = 0;
      for (int64_t s = 0; s < spatial; ++s) var += (in[s] - mean) * (in[s] - mean);
      var /= static_cast<double>(spatial);
      const double inv = 1.0 / std::sqrt(var + epsilon);
      const int64_t c = p % channels;
      for (int64_t s = 0; s < spatial; ++s) {
        o[s] = static_cast<T>(scale.data<T>()[c] * (in[s] - mean) * inv + bias.data<T>()[c]);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status LayerNorm(const Tensor& x, const Tensor& scale, const Tensor* bias, int64_t axis,
                       float epsilon, DataType stats_type, Tensor& out, Tensor* mean,
                       Tensor* inv_std_dev) {
  LS_RETURN_IF_ERROR(CheckFloat("LayerNormalization", {&x, &scale, bias}));
  if (stats_type != DataType::kFloat32 && stats_type != DataType::kFloat64) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormalization: statistics type ",
                                                   DataTypeName(stats_type), " is not supported"));
  }
  LS_ASSIGN_OR_RETURN(const LayerNormDims dims, LayerNormShapes(x.shape(), axis));
  const Shape normalized(x.shape().dims().subspan(dims.axis));
  // Scale and B broadcast onto the normalised dims; expand them to that shape.
  Tensor scale_full(x.dtype(), normalized);
  Tensor bias_full(x.dtype(), normalized);
  for (const Tensor* t : {&scale, bias}) {
    if (t == nullptr) continue;
    absl::StatusOr<Shape> b = BroadcastShapes(normalized, t->shape());
    if (!b.ok() || *b != normalized) {
      return absl::InvalidArgumentError(
          absl::StrCat("LayerNormalization: scale/B of shape ", t->shape().ToString(),
                       " does not broadcast onto the normalized dims ", normalized.ToString()));
    }
    if (normalized.NumElements() > 0) {
      BroadcastCopy(t->raw_data(), t->shape(),
                    (t == &scale ? scale_full : bias_full).mutable_raw_data(), normalized,
                    DataTypeSize(x.dtype()));
    }
  }
  DispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    out.Resize(x.dtype(), x.shape());
    if (mean != nullptr) mean->Resize(stats_type, dims.stats);
    if (inv_std_dev != nullptr) inv_std_dev->Resize(stats_type, dims.stats);
    const T* sc = scale_full.data<T>();
    const T* bi = bias_full.data<T>();
    for (int64_t r = 0; r < dims.outer; ++r) {
      const T* in = x.data<T>() + r * dims.inner;
      T* o = out.mutable_data<T>() + r * dims.inner;
      double m = 0;
      for (int64_t i = 0; i < dims.inner; ++i) m += in[i];
      m /= static_cast<double>(dims.inner);
      double var = 0;
      for (int64_t i = 0; i < dims.inner; ++i) var += (in[i] - m) * (in[i] - m);
      var /= static_cast<double>(dims.inner);
      const double inv = 1.0 / std::sqrt(var + epsilon);
      for (int64_t i = 0; i < dims.inner; ++i) {
        o[i] = static_cast<T>((in[i] - m) * inv * sc[i] + (bias != nullptr ? bi[i] : T{0}));
      }
      StoreStat(mean, r, m);
      StoreStat(inv_std_dev, r, inv);
    }
  });
  return absl::OkStatus();
}

absl::Status Lrn(const Tensor& x, int64_t size, float alpha, float beta, float bias, Tensor& out) {
  LS_RETURN_IF_ERROR(CheckFloat("LRN", {&x}));
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("LRN: input of shape ", x.shape().ToString(), " must have rank >= 2"));
  }
  if (size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("LRN: size ", size, " must be positive"));
  }
  DispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    out.Resize(x.dtype(), x.shape());
    const int64_t channels = x.dim(1);
    const int64_t spatial = x.shape().NumElements(2, x.rank());
    const int64_t before = (size - 1) / 2;
    const int64_t after = size - 1 - before;
    const T* px = x.data<T>();
    T* po = out.mutable_data<T>();
    for (int64_t n = 0; n < x.dim(0); ++n) {
      for (int64_t c = 0; c < channels; ++c) {
        for (int64_t s = 0; s < spatial; ++s) {
          double sum = 0;
          for (int64_t k = std::max<int64_t>(0, c - before);
               k <= std::min<int64_t>(channels - 1, c + after); ++k) {
            const double v = px[(n * channels + k) * spatial + s];
            sum += v * v;
          }
          const int64_t i = (n * channels + c) * spatial + s;
          po[i] = static_cast<T>(px[i] /
                                 std::pow(bias + alpha / static_cast<double>(size) * sum, beta));
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::reference
