#pragma once

// Building blocks for elementwise kernels: a broadcasting binary kernel parameterised by an op
// policy, and a unary kernel. Policies are stateless structs:
//
//   struct Policy {
//     static constexpr const char* kName = "Less";
//     // Output type for input type T (e.g. bool for comparisons).
//     template <typename T> using Out = bool;
//     // Whether the policy computes on T (checked at run time against the input dtype).
//     template <typename T> static constexpr bool Accepts() { ... }
//     template <typename T> static Out<T> Apply(T a, T b);
//   };

#include <array>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/broadcast.h"
#include "engine/kernels/native/common.h"

namespace loopserve::engine::native {

// Reads the opset < 7 "broadcast"/"axis" attributes.
inline absl::StatusOr<LegacyBroadcast> ReadLegacyBroadcast(const KernelInit& init, bool legacy) {
  LegacyBroadcast l;
  if (!legacy) return l;
  l.enabled = true;
  LS_ASSIGN_OR_RETURN(int64_t broadcast, init.node().GetInt("broadcast", 0));
  LS_ASSIGN_OR_RETURN(l.axis, init.node().GetInt("axis", -1));
  l.broadcast = broadcast != 0;
  return l;
}

// Calls fn(TypeTag<T>) for the dtype when Policy accepts T. Returns false otherwise.
template <typename Policy, typename Fn>
bool DispatchAccepted(DataType dtype, Fn&& fn) {
  bool accepted = false;
  DispatchNumericOrBool(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (Policy::template Accepts<T>()) {
      accepted = true;
      fn(tag);
    }
  });
  return accepted;
}

// out = Policy::Apply(a, b) with numpy broadcasting (or the opset < 7 rules); a and b have the
// same element type.
template <typename Policy>
class BinaryKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, bool legacy) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(LegacyBroadcast l, ReadLegacyBroadcast(init, legacy));
    return std::unique_ptr<Kernel>(new BinaryKernel(l));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype()) return TypeMismatch("input A", a.dtype(), "input B", b.dtype());
    Shape b_shape = b.shape();
    LS_RETURN_IF_ERROR(ApplyLegacyBroadcast(legacy_, a.shape(), &b_shape));
    if (b_shape == a.shape()) {
      // Equal shapes (a decoder's 1-element token compare): no broadcast plan to build.
      bool ok = DispatchAccepted<Policy>(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using O = typename Policy::template Out<T>;
        Tensor* y = ctx.output(0, DataTypeOf<O>::value, a.shape());
        const T* pa = a.data<T>();
        const T* pb = b.data<T>();
        O* out = y->mutable_data<O>();
        const int64_t n = a.NumElements();
        for (int64_t i = 0; i < n; ++i) out[i] = Policy::Apply(pa[i], pb[i]);
      });
      if (!ok) return UnsupportedType("input A", a.dtype());
      return absl::OkStatus();
    }
    Broadcast<2> bc;
    LS_RETURN_IF_ERROR(PrepareBroadcast<2>({&a.shape(), &b_shape}, &bc));
    bool ok = DispatchAccepted<Policy>(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using O = typename Policy::template Out<T>;
      Tensor* y = ctx.output(0, DataTypeOf<O>::value, bc.out_shape);
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      O* out = y->mutable_data<O>();
      ForEachBroadcast<2>(bc, [&](int64_t o, const std::array<int64_t, 2>& in) {
        out[o] = Policy::Apply(pa[in[0]], pb[in[1]]);
      });
    });
    if (!ok) return UnsupportedType("input A", a.dtype());
    return absl::OkStatus();
  }

 private:
  explicit BinaryKernel(LegacyBroadcast legacy) : legacy_(legacy) {}
  LegacyBroadcast legacy_;
};

// Output 0 = Policy::Apply(input 0) element by element, same shape and type; an error for a type
// the policy does not accept.
template <typename Policy>
absl::Status RunUnary(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool ok = DispatchAccepted<Policy>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor* y = ctx.output(0, x.dtype(), x.shape());
    const T* in = x.data<T>();
    T* out = y->mutable_data<T>();
    const int64_t n = x.NumElements();
    for (int64_t i = 0; i < n; ++i) out[i] = Policy::Apply(in[i]);
  });
  if (!ok) return UnsupportedType("input", x.dtype());
  return absl::OkStatus();
}

// out = Policy::Apply(x), same shape.
template <typename Policy>
class UnaryKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    return std::unique_ptr<Kernel>(new UnaryKernel());
  }

  absl::Status Run(KernelContext& ctx) const override { return RunUnary<Policy>(ctx); }
};

// Type predicates for policies.
template <typename T>
constexpr bool kIsBool = std::is_same_v<T, bool>;
template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;

}  // namespace loopserve::engine::native
