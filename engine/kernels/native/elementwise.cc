// Elementwise math: Ceil, Floor, Sign, Reciprocal, Pow, Mod, Max, Min, Where.

#include "engine/kernels/native/elementwise.h"

#include <cmath>
#include <limits>

#include "engine/kernels/native/half.h"
#include "engine/kernels/native/register_families.h"
#include "engine/kernels/native/saturate.h"
#include "engine/kernels/reference/broadcast.h"

namespace loopserve::engine::native {
namespace {

struct CeilOp {
  template <typename T>
  static constexpr bool Accepts() {
    return kIsFloat<T>;
  }
  template <typename T>
  static T Apply(T x) {
    return std::ceil(x);
  }
};
struct FloorOp {
  template <typename T>
  static constexpr bool Accepts() {
    return kIsFloat<T>;
  }
  template <typename T>
  static T Apply(T x) {
    return std::floor(x);
  }
};
struct ReciprocalOp {
  template <typename T>
  static constexpr bool Accepts() {
    return kIsFloat<T>;
  }
  template <typename T>
  static T Apply(T x) {
    return T{1} / x;
  }
};
// Sign: -1, 0 or 1; NaN stays NaN.
struct SignOp {
  template <typename T>
  static constexpr bool Accepts() {
    return !kIsBool<T>;
  }
  template <typename T>
  static T Apply(T x) {
    if constexpr (std::is_unsigned_v<T>) {
      return x > 0 ? T{1} : T{0};
    } else {
      return x > 0 ? T{1} : (x < 0 ? T{-1} : x);
    }
  }
};

// Integer power by squaring; wraps on overflow like the integer types do (computed unsigned to
// keep it defined). A negative exponent gives the truncated result: 0 unless |base| is 1.
template <typename T, typename E>
T IntPow(T base, E exp) {
  if constexpr (std::is_signed_v<E>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if constexpr (std::is_signed_v<T>) {
        if (base == -1) return (exp % 2 == 0) ? 1 : -1;
      }
      return 0;
    }
  }
  using U = std::make_unsigned_t<T>;
  U result = 1;
  U b = static_cast<U>(base);
  auto e = static_cast<std::make_unsigned_t<E>>(exp);
  while (e != 0) {
    if (e & 1) result = static_cast<U>(result * b);
    b = static_cast<U>(b * b);
    e >>= 1;
  }
  return static_cast<T>(result);
}

template <typename T, typename E>
T PowValue(T base, E exp) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(std::pow(base, static_cast<T>(exp)));
  } else if constexpr (std::is_floating_point_v<E>) {
    return SaturatingCast<T>(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  } else {
    return IntPow(base, exp);
  }
}

// Pow: base X of type T, exponent Y of any numeric type T1 (one type before opset 12), output T.
class PowKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, bool legacy) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(LegacyBroadcast l, ReadLegacyBroadcast(init, legacy));
    return std::unique_ptr<Kernel>(new PowKernel(l));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& e = ctx.input(1);
    Shape e_shape = e.shape();
    LS_RETURN_IF_ERROR(ApplyLegacyBroadcast(legacy_, x.shape(), &e_shape));
    Broadcast<2> bc;
    LS_RETURN_IF_ERROR(PrepareBroadcast<2>({&x.shape(), &e_shape}, &bc));
    bool exp_ok = true;
    const bool base_ok = DispatchNumeric(x.dtype(), [&](auto base_tag) {
      using T = typename decltype(base_tag)::type;
      exp_ok = DispatchNumeric(e.dtype(), [&](auto exp_tag) {
        using E = typename decltype(exp_tag)::type;
        Tensor* y = ctx.output(0, x.dtype(), bc.out_shape);
        const T* px = x.data<T>();
        const E* pe = e.data<E>();
        T* out = y->mutable_data<T>();
        if constexpr (std::is_floating_point_v<T>) {
          // A single exponent of 2 (x^2 in spectra and norms): x * x, exact to rounding as ONNX
          // Runtime computes it, without a pow call per element. One exponent keeps X's order.
          if (e.NumElements() == 1 && static_cast<double>(pe[0]) == 2.0) {
            const int64_t n = bc.out_shape.NumElements();
            for (int64_t o = 0; o < n; ++o) out[o] = px[o] * px[o];
            return;
          }
        }
        ForEachBroadcast<2>(bc, [&](int64_t o, const std::array<int64_t, 2>& in) {
          out[o] = PowValue(px[in[0]], pe[in[1]]);
        });
      });
    });
    if (!base_ok) return UnsupportedType("input X", x.dtype());
    if (!exp_ok) return UnsupportedType("input Y", e.dtype());
    return absl::OkStatus();
  }

 private:
  explicit PowKernel(LegacyBroadcast legacy) : legacy_(legacy) {}
  LegacyBroadcast legacy_;
};

// Mod: integer mod (sign of the divisor) by default; fmod=1 gives C fmod (sign of the dividend),
// which floating-point inputs require.
// Float copies of 16-bit float inputs and the float result, reused from run to run.
class HalfState : public KernelState {
 public:
  std::vector<Tensor> widened;
  Tensor result;
};

// fmod of floats, exact (as std::fmod) but without its bit-by-bit loop where the quotient is
// below 2^24: k = trunc(x / d) in double is then the true integer part (the quotient's distance
// from an integer is at least 2^-24, double's error below 2^-29), k d and x - k d are exact in
// double, and the result takes x's sign (fmod(-4, 2) is -0). Infinite or NaN operands, a zero or
// infinite divisor and larger quotients go to std::fmod.
inline float FastFmod(float x, float d) {
  const double q = static_cast<double>(x) / static_cast<double>(d);
  if (std::fabs(q) < 16777216.0 && std::isfinite(d)) {
    const double r = static_cast<double>(x) - std::trunc(q) * static_cast<double>(d);
    return std::copysign(static_cast<float>(r), x);
  }
  return std::fmod(x, d);
}

class ModKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(int64_t fmod, init.node().GetInt("fmod", 0));
    if (fmod != 0 && fmod != 1) {
      return absl::InvalidArgumentError(absl::StrCat("attribute fmod must be 0 or 1, got ", fmod));
    }
    return std::unique_ptr<Kernel>(new ModKernel(fmod == 1));
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<HalfState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype()) return TypeMismatch("input A", a.dtype(), "input B", b.dtype());
    if (!IsHalfType(a.dtype())) {
      return Compute(a, b, [&](const Shape& shape) { return ctx.output(0, a.dtype(), shape); });
    }
    // 16-bit floats: fmod in float (exact for values of the narrower type), rounded back.
    HalfState& state = *ctx.state<HalfState>();
    state.widened.resize(2);
    WidenHalf(a, state.widened[0]);
    WidenHalf(b, state.widened[1]);
    LS_RETURN_IF_ERROR(Compute(state.widened[0], state.widened[1], [&](const Shape& shape) {
      state.result.Resize(DataType::kFloat32, shape);
      return &state.result;
    }));
    NarrowHalf(state.result, *ctx.output(0, a.dtype(), state.result.shape()));
    return absl::OkStatus();
  }

 private:
  template <typename Output>
  absl::Status Compute(const Tensor& a, const Tensor& b, Output output) const {
    if (IsFloatingPoint(a.dtype()) && !fmod_) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute fmod must be 1 for ", DataTypeName(a.dtype()), " inputs"));
    }
    Broadcast<2> bc;
    LS_RETURN_IF_ERROR(PrepareBroadcast<2>({&a.shape(), &b.shape()}, &bc));
    bool divided_by_zero = false;
    const bool ok = DispatchNumeric(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor* y = output(bc.out_shape);
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* out = y->mutable_data<T>();
      const bool fmod = fmod_;
      ForEachBroadcast<2>(bc, [&](int64_t o, const std::array<int64_t, 2>& in) {
        const T x = pa[in[0]];
        const T d = pb[in[1]];
        if constexpr (std::is_same_v<T, float>) {
          out[o] = FastFmod(x, d);
        } else if constexpr (std::is_floating_point_v<T>) {
          out[o] = std::fmod(x, d);
        } else {
          if (d == 0) {
            divided_by_zero = true;
            out[o] = 0;
            return;
          }
          if constexpr (std::is_signed_v<T>) {
            // x % -1 traps for the most negative x; it is always 0.
            if (d == -1) {
              out[o] = 0;
              return;
            }
            T r = static_cast<T>(x % d);
            if (!fmod && r != 0 && ((r < 0) != (d < 0))) r = static_cast<T>(r + d);
            out[o] = r;
          } else {
            out[o] = static_cast<T>(x % d);
          }
        }
      });
    });
    if (!ok) return UnsupportedType("input A", a.dtype());
    if (divided_by_zero) return absl::InvalidArgumentError("integer modulo by zero");
    return absl::OkStatus();
  }

  explicit ModKernel(bool fmod) : fmod_(fmod) {}
  bool fmod_;
};

// Max / Min of any number of inputs, broadcast together. NaN wins (as in numpy).
template <bool kMax>
class MinMaxKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1 << 20));
    for (int i = 0; i < init.num_inputs(); ++i) {
      if (!init.has_input(i)) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
      }
    }
    return std::unique_ptr<Kernel>(new MinMaxKernel());
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<HalfState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const int n = ctx.num_inputs();
    absl::InlinedVector<const Tensor*, 4> inputs;
    for (int i = 0; i < n; ++i) {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != ctx.input(0).dtype()) {
        return TypeMismatch(absl::StrCat("input ", i), t.dtype(), "input 0", ctx.input(0).dtype());
      }
      inputs.push_back(&t);
    }
    const DataType type = inputs[0]->dtype();
    if (!IsHalfType(type)) {
      return Compute(inputs, [&](const Shape& shape) { return ctx.output(0, type, shape); });
    }
    // 16-bit floats: computed in float and rounded back (min/max are exact either way).
    HalfState& state = *ctx.state<HalfState>();
    state.widened.resize(n);
    for (int i = 0; i < n; ++i) {
      WidenHalf(*inputs[i], state.widened[i]);
      inputs[i] = &state.widened[i];
    }
    LS_RETURN_IF_ERROR(Compute(inputs, [&](const Shape& shape) {
      state.result.Resize(DataType::kFloat32, shape);
      return &state.result;
    }));
    NarrowHalf(state.result, *ctx.output(0, type, state.result.shape()));
    return absl::OkStatus();
  }

 private:
  MinMaxKernel() = default;

  // The result of `inputs` into the tensor `output(shape)` returns.
  template <typename Output>
  absl::Status Compute(absl::Span<const Tensor* const> inputs, Output output) const {
    const Tensor& first = *inputs[0];
    if (inputs.size() == 2) return RunBinary(first, *inputs[1], output);
    Shape out_shape = first.shape();
    for (size_t i = 1; i < inputs.size(); ++i) {
      Broadcast<2> bc;
      LS_RETURN_IF_ERROR(PrepareBroadcast<2>({&out_shape, &inputs[i]->shape()}, &bc));
      out_shape = bc.out_shape;
    }
    absl::Status status;
    const bool ok = DispatchNumeric(first.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor* y = output(out_shape);
      T* out = y->mutable_data<T>();
      // out = first broadcast to out_shape, then out = op(out, input i) in place.
      Broadcast<2> bc;
      status = PrepareBroadcast<2>({&out_shape, &first.shape()}, &bc);
      if (!status.ok()) return;
      const T* p0 = first.data<T>();
      ForEachBroadcast<2>(bc,
                          [&](int64_t o, const std::array<int64_t, 2>& in) { out[o] = p0[in[1]]; });
      for (size_t i = 1; i < inputs.size(); ++i) {
        const Tensor& t = *inputs[i];
        status = PrepareBroadcast<2>({&out_shape, &t.shape()}, &bc);
        if (!status.ok()) return;
        const T* p = t.data<T>();
        ForEachBroadcast<2>(bc, [&](int64_t o, const std::array<int64_t, 2>& in) {
          out[o] = Pick(out[o], p[in[1]]);
        });
      }
    });
    if (!ok) return UnsupportedType("input 0", first.dtype());
    return status;
  }

  // The common two-input case in one broadcast pass.
  template <typename Output>
  absl::Status RunBinary(const Tensor& a, const Tensor& b, Output output) const {
    Broadcast<2> bc;
    LS_RETURN_IF_ERROR(PrepareBroadcast<2>({&a.shape(), &b.shape()}, &bc));
    const bool ok = DispatchNumeric(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor* y = output(bc.out_shape);
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* out = y->mutable_data<T>();
      ForEachBroadcast<2>(bc, [&](int64_t o, const std::array<int64_t, 2>& in) {
        out[o] = Pick(pa[in[0]], pb[in[1]]);
      });
    });
    if (!ok) return UnsupportedType("input 0", a.dtype());
    return absl::OkStatus();
  }

  template <typename T>
  static T Pick(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
    }
    if constexpr (kMax) {
      return a < b ? b : a;
    } else {
      return b < a ? b : a;
    }
  }
};

// Where(condition, X, Y) with three-way broadcasting; X and Y of any (equal) element type.
class WhereKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 3, 3));
    return std::unique_ptr<Kernel>(new WhereKernel());
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& c = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    if (c.dtype() != DataType::kBool) {
      return absl::InvalidArgumentError(
          absl::StrCat("condition must be bool, got ", DataTypeName(c.dtype())));
    }
    if (x.dtype() != y.dtype()) return TypeMismatch("input X", x.dtype(), "input Y", y.dtype());
    Broadcast<3> bc;
    LS_RETURN_IF_ERROR(PrepareBroadcast<3>({&c.shape(), &x.shape(), &y.shape()}, &bc));
    Tensor* out = ctx.output(0, x.dtype(), bc.out_shape);
    const bool ok = DispatchBySize(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const bool* pc = c.data<bool>();
      const T* px = x.data<T>();
      const T* py = y.data<T>();
      T* po = out->mutable_data<T>();
      if (bc.out_shape.NumElements() == 0) return;
      // Rows of the collapsed broadcast layout: each operand's stride along a row is 0 or 1, and
      // the all-contiguous row is a plain select loop the compiler vectorises.
      const Shape* shapes[] = {&c.shape(), &x.shape(), &y.shape()};
      const reference::BroadcastLayout layout =
          reference::MakeBroadcastLayout(bc.out_shape, shapes);
      const int64_t n = layout.dims.back();
      const int64_t sc = layout.strides[0].back(), sx = layout.strides[1].back(),
                    sy = layout.strides[2].back();
      // Branch-free (a random condition mispredicts half the branches): T is the unsigned
      // integer of the element's size, selected through an all-ones or all-zeros mask.
      const uint8_t* pc8 = reinterpret_cast<const uint8_t*>(pc);
      reference::ForEachInner(layout, 1, [&](int64_t o, const int64_t* in) {
        const uint8_t* rc = pc8 + in[0];
        const T* rx = px + in[1];
        const T* ry = py + in[2];
        T* ro = po + o;
        if (sc == 1 && sx == 1 && sy == 1) {
          for (int64_t i = 0; i < n; ++i) {
            const T m = static_cast<T>(T{0} - static_cast<T>(rc[i] != 0));
            ro[i] = static_cast<T>((rx[i] & m) | (ry[i] & static_cast<T>(~m)));
          }
        } else {
          for (int64_t i = 0; i < n; ++i) {
            const T m = static_cast<T>(T{0} - static_cast<T>(rc[i * sc] != 0));
            ro[i] = static_cast<T>((rx[i * sx] & m) | (ry[i * sy] & static_cast<T>(~m)));
          }
        }
      });
    });
    if (!ok) return UnsupportedType("input X", x.dtype());
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterElementwiseKernels(KernelRegistry& registry) {
  registry.Register("Ceil", FactoryOf<UnaryKernel<CeilOp>>());
  registry.Register("Floor", FactoryOf<UnaryKernel<FloorOp>>());
  registry.Register("Reciprocal", FactoryOf<UnaryKernel<ReciprocalOp>>());
  registry.Register("Sign", FactoryOf<UnaryKernel<SignOp>>());
  registry.Register("Pow", FactoryOf<PowKernel>(true), 1, 6);
  registry.Register("Pow", FactoryOf<PowKernel>(false), 7);
  registry.Register("Mod", FactoryOf<ModKernel>());
  registry.Register("Max", FactoryOf<MinMaxKernel<true>>());
  registry.Register("Min", FactoryOf<MinMaxKernel<false>>());
  registry.Register("Where", FactoryOf<WhereKernel>());
}

}  // namespace loopserve::engine::native
