// Reference activations (LeakyRelu, Elu, Selu, ...) and PRelu; see reference.h.

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

double Apply(ActivationOp op, const ActivationParams& p, double x) {
  switch (op) {
    case ActivationOp::kLeakyRelu:
      return x >= 0 ? x : p.alpha * x;
    case ActivationOp::kElu:
      return x >= 0 ? x : p.alpha * std::expm1(x);
    case ActivationOp::kSelu:
      return p.gamma * (x > 0 ? x : p.alpha * std::expm1(x));
    case ActivationOp::kHardSigmoid:
      return std::max(0.0, std::min(1.0, p.alpha * x + p.beta));
    case ActivationOp::kHardSwish:
      return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5));
    case ActivationOp::kSoftplus:
      // log(1 + e^x) without overflow for large x.
      return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    case ActivationOp::kSoftsign:
      return x / (1.0 + std::abs(x));
    case ActivationOp::kCelu:
      return std::max(0.0, x) + std::min(0.0, p.alpha * std::expm1(x / p.alpha));
  }
  return 0;
}

}  // namespace

absl::string_view ActivationOpName(ActivationOp op) {
  switch (op) {
    case ActivationOp::kLeakyRelu:
      return "LeakyRelu";
    case ActivationOp::kElu:
      return "Elu";
    case ActivationOp::kSelu:
      return "Selu";
    case ActivationOp::kHardSigmoid:
      return "HardSigmoid";
    case ActivationOp::kHardSwish:
      return "HardSwish";
    case ActivationOp::kSoftplus:
      return "Softplus";
    case ActivationOp::kSoftsign:
      return "Softsign";
    case ActivationOp::kCelu:
      return "Celu";
  }
  return "?";
}

absl::Status Activation(ActivationOp op, const ActivationParams& params, const Tensor& x,
                        Tensor& out) {
  if (!IsFloatingPoint(x.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        ActivationOpName(op), " does not support element type ", DataTypeName(x.dtype())));
  }
  DispatchNumeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      out.Resize(x.dtype(), x.shape());
      const T* in = x.data<T>();
      T* o = out.mutable_data<T>();
      const int64_t n = x.NumElements();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(Apply(op, params, in[i]));
    }
  });
  return absl::OkStatus();
}

absl::Status PRelu(const Tensor& x, const Tensor& slope, Tensor& out) {
  if (x.dtype() != slope.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("PRelu: inputs have element types ",
                                                   DataTypeName(x.dtype()), " and ",
                                                   DataTypeName(slope.dtype())));
  }
  absl::StatusOr<Shape> shape = BroadcastShapes(x.shape(), slope.shape());
  if (!shape.ok() || *shape != x.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PRelu: slope of shape ", slope.shape().ToString(),
                     " does not broadcast onto input ", x.shape().ToString()));
  }
  const bool supported = DispatchNumeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    out.Resize(x.dtype(), x.shape());
    if (out.NumElements() == 0) return;
    const Shape* inputs[] = {&x.shape(), &slope.shape()};
    const BroadcastLayout layout = MakeBroadcastLayout(x.shape(), inputs);
    const T* px = x.data<T>();
    const T* ps = slope.data<T>();
    T* po = out.mutable_data<T>();
    const int64_t row = layout.dims.back();
    const int64_t sx = layout.strides[0].back();
    const int64_t ss = layout.strides[1].back();
    ForEachRow(layout, [&](int64_t out_offset, const int64_t* in) {
      for (int64_t j = 0; j < row; ++j) {
        const T v = px[in[0] + j * sx];
        po[out_offset + j] = v < T{0} ? static_cast<T>(ps[in[1] + j * ss] * v) : v;
      }
    });
  });
  if (!supported) {
    return absl::InvalidArgumentError(
        absl::StrCat("PRelu does not support element type ", DataTypeName(x.dtype())));
  }
  return absl::OkStatus();
}

}  // namespace loopserve::engine::reference
