// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (8-bit, per-tensor or per-axis).

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
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
            for (int64_t i = 0; i < p.inner; ++i) {
              out[base + i] = static_cast<float>(static_cast<int64_t>(in[base + i]) - z) * s;
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
    float lo = 0;
    float hi = 0;
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min(lo, in[i]);
      hi = std::max(hi, in[i]);
    }
    const float scale = (hi - lo) / 255.0f;
    const uint8_t zero = scale == 0 ? 0 : Saturate<uint8_t>(-lo / scale);
    uint8_t* out = ctx.output(0, DataType::kUint8, x.shape())->mutable_data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      out[i] = scale == 0 ? zero : Saturate<uint8_t>(std::nearbyint(in[i] / scale) + zero);
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
