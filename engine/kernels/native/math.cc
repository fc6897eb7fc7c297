// Elementwise math: trigonometric and hyperbolic functions, Erf, Round, Mish, IsNaN, IsInf, Clip,
// Shrink, ThresholdedRelu, BitShift and the variadic Sum / Mean. Sin, Cos, Tan, Asin, Acos, Atan,
// Sinh, Cosh, Asinh, Acosh, Atanh, Erf, Round and Mish run float32 on vector_math.

#include <cmath>
#include <limits>
#include <type_traits>

#include "engine/kernels/native/elementwise.h"
#include "engine/kernels/native/register_families.h"
#include "engine/kernels/native/saturate.h"
#include "engine/kernels/native/vector_math.h"

namespace loopserve::engine::native {
namespace {

// A row of engine/ir/eltwise_fn.h marked kEltwiseVector: float32 on vector_math (SLEEF / own
// vector code, the CPU's ISA), other float types through the row's scalar expression element by
// element.
template <EltwiseFn kFn>
struct TablePolicy {
  template <typename T>
  static constexpr bool Accepts() {
    return kIsFloat<T>;
  }
  template <typename T>
  static T Apply(T x) {
    return EltwiseScalar<T>(kFn, x);
  }
};

template <EltwiseFn kFn>
class VectorUnaryKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    return std::unique_ptr<Kernel>(new VectorUnaryKernel());
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == DataType::kFloat32) {
      Tensor* y = ctx.output(0, x.dtype(), x.shape());
      UnaryF32(kFn, x.data<float>(), y->mutable_data<float>(), x.NumElements());
      return absl::OkStatus();
    }
    return RunUnary<TablePolicy<kFn>>(ctx);
  }
};

// IsNaN(X) -> bool.
class IsNaNKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    return std::unique_ptr<Kernel>(new IsNaNKernel());
  }
  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (!IsFloatingPoint(x.dtype())) return UnsupportedType("input", x.dtype());
    Tensor* y = ctx.output(0, DataType::kBool, x.shape());
    bool* out = y->mutable_data<bool>();
    const int64_t n = x.NumElements();
    DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        const T* in = x.data<T>();
        for (int64_t i = 0; i < n; ++i) out[i] = std::isnan(in[i]);
      }
    });
    return absl::OkStatus();
  }
};

// IsInf(X; detect_negative, detect_positive) -> bool.
class IsInfKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    LS_ASSIGN_OR_RETURN(int64_t neg, init.node().GetInt("detect_negative", 1));
    LS_ASSIGN_OR_RETURN(int64_t pos, init.node().GetInt("detect_positive", 1));
    return std::unique_ptr<Kernel>(new IsInfKernel(neg != 0, pos != 0));
  }
  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (!IsFloatingPoint(x.dtype())) return UnsupportedType("input", x.dtype());
    Tensor* y = ctx.output(0, DataType::kBool, x.shape());
    bool* out = y->mutable_data<bool>();
    const int64_t n = x.NumElements();
    DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        const T* in = x.data<T>();
        for (int64_t i = 0; i < n; ++i) {
          out[i] = std::isinf(in[i]) && (in[i] > 0 ? positive_ : negative_);
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  IsInfKernel(bool negative, bool positive) : negative_(negative), positive_(positive) {}
  bool negative_;
  bool positive_;
};

// Clip(input, min?, max?): min/max are attributes before opset 11 (float only), optional scalar
// inputs from 11 (any numeric type from 12). A bound that is absent does not clip.
class ClipKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, ListFrom from) {
    if (from == ListFrom::kAttribute) {
      LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
      LS_ASSIGN_OR_RETURN(float lo,
                          init.node().GetFloat("min", -std::numeric_limits<float>::max()));
      LS_ASSIGN_OR_RETURN(float hi, init.node().GetFloat("max", std::numeric_limits<float>::max()));
      return std::unique_ptr<Kernel>(new ClipKernel(from, lo, hi));
    }
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 3));
    return std::unique_ptr<Kernel>(new ClipKernel(from, 0, 0));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    for (int i = 1; i <= 2 && from_ == ListFrom::kInput; ++i) {
      if (!ctx.has_input(i)) continue;
      const Tensor& b = ctx.input(i);
      if (b.dtype() != x.dtype()) {
        return TypeMismatch(i == 1 ? "input 'min'" : "input 'max'", b.dtype(), "input", x.dtype());
      }
      if (b.NumElements() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            i == 1 ? "min" : "max", " must be a scalar, got shape ", b.shape().ToString()));
      }
    }
    const bool ok = DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T lo = std::numeric_limits<T>::lowest();
      T hi = std::numeric_limits<T>::max();
      if (from_ == ListFrom::kAttribute) {
        // Float bounds on an integer input saturate (the default -FLT_MAX is lowest()); a NaN
        // bound is no bound.
        if constexpr (std::is_integral_v<T>) {
          if (!std::isnan(attr_min_)) lo = SaturatingCast<T>(attr_min_);
          if (!std::isnan(attr_max_)) hi = SaturatingCast<T>(attr_max_);
        } else {
          lo = static_cast<T>(attr_min_);
          hi = static_cast<T>(attr_max_);
        }
      } else {
        if (ctx.has_input(1)) lo = ctx.input(1).data<T>()[0];
        if (ctx.has_input(2)) hi = ctx.input(2).data<T>()[0];
      }
      Tensor* y = ctx.output(0, x.dtype(), x.shape());
      const T* in = x.data<T>();
      T* out = y->mutable_data<T>();
      const int64_t n = x.NumElements();
      // min > max gives max everywhere, as in numpy.clip.
      for (int64_t i = 0; i < n; ++i) {
        const T v = in[i];
        out[i] = v < lo ? lo : v;
        if (hi < out[i]) out[i] = hi;
      }
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }

 private:
  ClipKernel(ListFrom from, float lo, float hi) : from_(from), attr_min_(lo), attr_max_(hi) {}
  ListFrom from_;
  float attr_min_;
  float attr_max_;
};

// Shrink(x; bias, lambd): x + bias below -lambd, x - bias above lambd, 0 between.
// ThresholdedRelu(x; alpha): x above alpha, else 0. Both keep the input type.
class ShrinkKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init,
                                                        bool thresholded_relu) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    float bias = 0;
    float lambd = 0;
    if (thresholded_relu) {
      LS_ASSIGN_OR_RETURN(lambd, init.node().GetFloat("alpha", 1.0f));
    } else {
      LS_ASSIGN_OR_RETURN(bias, init.node().GetFloat("bias", 0.0f));
      LS_ASSIGN_OR_RETURN(lambd, init.node().GetFloat("lambd", 0.5f));
    }
    return std::unique_ptr<Kernel>(new ShrinkKernel(thresholded_relu, bias, lambd));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (relu_ && !IsFloatingPoint(x.dtype())) return UnsupportedType("input", x.dtype());
    const bool ok = DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor* y = ctx.output(0, x.dtype(), x.shape());
      const T* in = x.data<T>();
      T* out = y->mutable_data<T>();
      const int64_t n = x.NumElements();
      const double lambd = lambd_;
      const double bias = bias_;
      for (int64_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(in[i]);
        if (relu_) {
          out[i] = v > lambd ? in[i] : T{0};
        } else if (v < -lambd) {
          out[i] = static_cast<T>(v + bias);
        } else if (v > lambd) {
          out[i] = static_cast<T>(v - bias);
        } else {
          out[i] = T{0};
        }
      }
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }

 private:
  ShrinkKernel(bool relu, float bias, float lambd) : relu_(relu), bias_(bias), lambd_(lambd) {}
  bool relu_;
  float bias_;
  float lambd_;
};

// BitShift(X, Y; direction): unsigned integer shifts with broadcasting. Shifting by the type's
// width or more gives 0 (instead of undefined behaviour).
class BitShiftKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(std::string direction, init.node().GetString("direction", std::nullopt));
    if (direction != "LEFT" && direction != "RIGHT") {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute direction must be LEFT or RIGHT, got '", direction, "'"));
    }
    return std::unique_ptr<Kernel>(new BitShiftKernel(direction == "LEFT"));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype()) return TypeMismatch("input X", a.dtype(), "input Y", b.dtype());
    Broadcast<2> bc;
    LS_RETURN_IF_ERROR(PrepareBroadcast<2>({&a.shape(), &b.shape()}, &bc));
    bool ok = false;
    DispatchNumeric(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_unsigned_v<T>) {
        ok = true;
        Tensor* y = ctx.output(0, a.dtype(), bc.out_shape);
        const T* pa = a.data<T>();
        const T* pb = b.data<T>();
        T* out = y->mutable_data<T>();
        const bool left = left_;
        ForEachBroadcast<2>(bc, [&](int64_t o, const std::array<int64_t, 2>& in) {
          const T s = pb[in[1]];
          if (s >= sizeof(T) * 8) {
            out[o] = 0;
          } else {
            out[o] = static_cast<T>(left ? pa[in[0]] << s : pa[in[0]] >> s);
          }
        });
      }
    });
    if (!ok) return UnsupportedType("input X", a.dtype());
    return absl::OkStatus();
  }

 private:
  explicit BitShiftKernel(bool left) : left_(left) {}
  bool left_;
};

// Sum / Mean of one or more inputs with multidirectional broadcasting.
template <bool kMean>
class SumKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, bool legacy) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1 << 20));
    for (int i = 0; i < init.num_inputs(); ++i) {
      if (!init.has_input(i)) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
      }
    }
    return std::unique_ptr<Kernel>(new SumKernel(legacy));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const int n = ctx.num_inputs();
    const Tensor& first = ctx.input(0);
    Shape out_shape = first.shape();
    for (int i = 1; i < n; ++i) {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != first.dtype()) {
        return TypeMismatch(absl::StrCat("input ", i), t.dtype(), "input 0", first.dtype());
      }
      if (legacy_ && t.shape() != first.shape()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " has shape ", t.shape().ToString(), ", input 0 has ",
                         first.shape().ToString(), " (no broadcasting before opset 8)"));
      }
      Broadcast<2> bc;
      LS_RETURN_IF_ERROR(PrepareBroadcast<2>({&out_shape, &t.shape()}, &bc));
      out_shape = bc.out_shape;
    }
    absl::Status status;
    const bool ok = DispatchNumeric(first.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kMean && !std::is_floating_point_v<T>) return;
      Tensor* y = ctx.output(0, first.dtype(), out_shape);
      T* out = y->mutable_data<T>();
      const int64_t count = out_shape.NumElements();
      std::fill_n(out, count, T{0});
      Broadcast<2> bc;
      for (int i = 0; i < n; ++i) {
        const Tensor& t = ctx.input(i);
        status = PrepareBroadcast<2>({&out_shape, &t.shape()}, &bc);
        if (!status.ok()) return;
        const T* p = t.data<T>();
        ForEachBroadcast<2>(bc, [&](int64_t o, const std::array<int64_t, 2>& in) {
          out[o] = static_cast<T>(out[o] + p[in[1]]);
        });
      }
      if constexpr (kMean) {
        for (int64_t i = 0; i < count; ++i) out[i] = out[i] / static_cast<T>(n);
      }
    });
    if (!ok || (kMean && !IsFloatingPoint(first.dtype()))) {
      return UnsupportedType("input 0", first.dtype());
    }
    return status;
  }

 private:
  explicit SumKernel(bool legacy) : legacy_(legacy) {}
  bool legacy_;
};

}  // namespace

void RegisterMathKernels(KernelRegistry& registry) {
  // The rows of engine/ir/eltwise_fn.h marked kEltwiseVector (Sin, Cos, Tan, Asin, Acos, Atan,
  // Sinh, Cosh, Asinh, Acosh, Atanh,
  // Erf, Round, Mish).
#define LS_REGISTER_VECTOR_ROW(e, name, flags, expr)                       \
  if constexpr (((flags)&kEltwiseVector) != 0) {                           \
    registry.Register(name, FactoryOf<VectorUnaryKernel<EltwiseFn::e>>()); \
  }
  LS_ELTWISE_FNS(LS_REGISTER_VECTOR_ROW)
#undef LS_REGISTER_VECTOR_ROW
  registry.Register("IsNaN", FactoryOf<IsNaNKernel>());
  registry.Register("IsInf", FactoryOf<IsInfKernel>());
  registry.Register("Clip", FactoryOf<ClipKernel>(ListFrom::kAttribute), 1, 10);
  registry.Register("Clip", FactoryOf<ClipKernel>(ListFrom::kInput), 11);
  registry.Register("Shrink", FactoryOf<ShrinkKernel>(false));
  registry.Register("ThresholdedRelu", FactoryOf<ShrinkKernel>(true));
  registry.Register("BitShift", FactoryOf<BitShiftKernel>());
  registry.Register("Sum", FactoryOf<SumKernel<false>>(true), 1, 7);
  registry.Register("Sum", FactoryOf<SumKernel<false>>(false), 8);
  registry.Register("Mean", FactoryOf<SumKernel<true>>(true), 1, 7);
  registry.Register("Mean", FactoryOf<SumKernel<true>>(false), 8);
}

}  // namespace loopserve::engine::native
