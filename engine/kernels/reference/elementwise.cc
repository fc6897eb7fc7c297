// Reference Add/Sub/Mul/Div and the unary ops; see reference.h.

#include <cmath>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/reference/broadcast.h"
#include "engine/kernels/reference/reference.h"
#include "engine/tensor/dtype.h"

namespace loopserve::engine::reference {
namespace {

// Integer arithmetic is done in an unsigned type at least as wide as unsigned int, so overflow
// wraps instead of being undefined (small types would otherwise promote to signed int).
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
T Apply(BinaryOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using W = WrapType<T>;
    switch (op) {
      case BinaryOp::kAdd:
        return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
      case BinaryOp::kSub:
        return static_cast<T>(static_cast<W>(a) - static_cast<W>(b));
      case BinaryOp::kMul:
        return static_cast<T>(static_cast<W>(a) * static_cast<W>(b));
      case BinaryOp::kDiv:
        // The caller has rejected b == 0. min / -1 overflows (and traps on x86): it wraps to min.
        if constexpr (std::is_signed_v<T>) {
          if (b == -1) return static_cast<T>(W{0} - static_cast<W>(a));
        }
        return static_cast<T>(a / b);
      default:
        return T{};  // rejected before
    }
  } else {
    switch (op) {
      case BinaryOp::kAdd:
        return a + b;
      case BinaryOp::kSub:
        return a - b;
      case BinaryOp::kMul:
        return a * b;
      case BinaryOp::kDiv:
        return a / b;
      default:
        return T{};  // rejected before
    }
  }
  return T{};
}

template <typename T>
absl::Status BinaryTyped(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if constexpr (std::is_integral_v<T>) {
    if (op == BinaryOp::kDiv) {
      for (T v : b.span<T>()) {
        if (v == 0) return absl::InvalidArgumentError("integer division by zero");
      }
    }
  }
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.mutable_data<T>();
  // Fast paths for the shapes loop bodies use most (same shape, or one side a single element):
  // building a BroadcastLayout costs more than the arithmetic on a counter or a small vector.
  const int64_t n = out.NumElements();
  const bool a_full = a.shape() == out.shape();
  const bool b_full = b.shape() == out.shape();
  if (a_full && b_full) {
    for (int64_t j = 0; j < n; ++j) po[j] = Apply<T>(op, pa[j], pb[j]);
    return absl::OkStatus();
  }
  if (a_full && b.NumElements() == 1) {
    const T vb = pb[0];
    for (int64_t j = 0; j < n; ++j) po[j] = Apply<T>(op, pa[j], vb);
    return absl::OkStatus();
  }
  if (b_full && a.NumElements() == 1) {
    const T va = pa[0];
    for (int64_t j = 0; j < n; ++j) po[j] = Apply<T>(op, va, pb[j]);
    return absl::OkStatus();
  }
  const Shape* inputs[] = {&a.shape(), &b.shape()};
  const BroadcastLayout layout = MakeBroadcastLayout(out.shape(), inputs);
  const int64_t row = layout.dims.back();
  const int64_t sa = layout.strides[0].back();
  const int64_t sb = layout.strides[1].back();
  ForEachRow(layout, [&](int64_t out_offset, const int64_t* in) {
    const T* ra = pa + in[0];
    const T* rb = pb + in[1];
    T* ro = po + out_offset;
    for (int64_t j = 0; j < row; ++j) ro[j] = Apply<T>(op, ra[j * sa], rb[j * sb]);
  });
  return absl::OkStatus();
}

bool IsFloatOnly(UnaryOp op) {
  return op != UnaryOp::kRelu && op != UnaryOp::kAbs && op != UnaryOp::kNeg;
}

template <typename T>
T Apply(UnaryOp op, T x) {
  if constexpr (std::is_integral_v<T>) {
    using W = WrapType<T>;
    switch (op) {
      case UnaryOp::kRelu:
        return x < T{0} ? T{0} : x;
      case UnaryOp::kAbs:
        if constexpr (std::is_signed_v<T>) {
          return x < 0 ? static_cast<T>(W{0} - static_cast<W>(x)) : x;
        } else {
          return x;
        }
      case UnaryOp::kNeg:
        return static_cast<T>(W{0} - static_cast<W>(x));
      default:
        return T{};  // float-only ops are rejected before
    }
  } else {
    const double v = x;
    switch (op) {
      case UnaryOp::kRelu:
        return x < 0 ? T{0} : x;
      case UnaryOp::kTanh:
        return static_cast<T>(std::tanh(v));
      case UnaryOp::kSigmoid:
        return static_cast<T>(1.0 / (1.0 + std::exp(-v)));
      case UnaryOp::kExp:
        return static_cast<T>(std::exp(v));
      case UnaryOp::kLog:
        return static_cast<T>(std::log(v));
      case UnaryOp::kSqrt:
        return static_cast<T>(std::sqrt(v));
      case UnaryOp::kAbs:
        return std::abs(x);
      case UnaryOp::kNeg:
        return -x;
      default:
        return T{};  // rejected before
    }
    return T{};
  }
}

absl::Status UnsupportedType(absl::string_view op, DataType type) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, " does not support element type ", DataTypeName(type)));
}

}  // namespace

absl::Status Binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (op != BinaryOp::kAdd && op != BinaryOp::kSub && op != BinaryOp::kMul &&
      op != BinaryOp::kDiv) {
    return absl::InvalidArgumentError(
        absl::StrCat("the reference Binary does not compute ", BinaryOpName(op)));
  }
  if (a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs have element types ", DataTypeName(a.dtype()), " and ", DataTypeName(b.dtype())));
  }
  // Equal shapes (the common case in loop bodies) need no broadcast computation.
  const bool same = a.shape() == b.shape();
  Shape broadcast_shape;
  if (!same) {
    LS_ASSIGN_OR_RETURN(broadcast_shape, BroadcastShapes(a.shape(), b.shape()));
  }
  const Shape& out_shape = same ? a.shape() : broadcast_shape;
  absl::Status status;
  const bool supported = DispatchNumeric(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    out.Resize(a.dtype(), out_shape);
    if (out.NumElements() == 0) return;
    status = BinaryTyped<T>(op, a, b, out);
  });
  if (!supported) return UnsupportedType(BinaryOpName(op), a.dtype());
  return status;
}

absl::Status Unary(UnaryOp op, const Tensor& x, Tensor& out) {
  switch (op) {
    case UnaryOp::kRelu:
    case UnaryOp::kTanh:
    case UnaryOp::kSigmoid:
    case UnaryOp::kExp:
    case UnaryOp::kLog:
    case UnaryOp::kSqrt:
    case UnaryOp::kAbs:
    case UnaryOp::kNeg:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("the reference Unary does not compute ", UnaryOpName(op)));
  }
  const DataType type = x.dtype();
  bool type_ok = IsFloatingPoint(type) || (IsInteger(type) && !IsFloatOnly(op));
  if (op == UnaryOp::kNeg) {
    DispatchNumeric(type, [&](auto tag) {
      if (std::is_unsigned_v<typename decltype(tag)::type>) type_ok = false;
    });
  }
  if (!type_ok) return UnsupportedType(UnaryOpName(op), type);
  DispatchNumeric(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    out.Resize(type, x.shape());
    const T* in = x.data<T>();
    T* o = out.mutable_data<T>();
    const int64_t n = x.NumElements();
    for (int64_t i = 0; i < n; ++i) o[i] = Apply<T>(op, in[i]);
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::reference
