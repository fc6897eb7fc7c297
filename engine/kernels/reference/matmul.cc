// Reference MatMul and Gemm; see reference.h.

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/reference/broadcast.h"
#include "engine/kernels/reference/reference.h"
#include "engine/tensor/dtype.h"

namespace loopserve::engine::reference {
namespace {

// Floats accumulate in double (this is an oracle); integers in a wrapping unsigned type of the
// element's width, so overflow behaves as the integer type would on any sane machine.
template <typename T, bool = std::is_floating_point_v<T>>
struct Accumulator {
  using type = double;
};
template <typename T>
struct Accumulator<T, false> {
  using type =
      std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};
template <typename T>
using AccType = typename Accumulator<T>::type;

// c[m x n] = a[m x k] * b[k x n], where a(i, p) = a[i * a_row + p * a_col] (and likewise b), so
// transposed operands are just other strides.
template <typename T>
void MatrixProduct(const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t b_row,
                   int64_t b_col, int64_t m, int64_t k, int64_t n, AccType<T>* c) {
  using Acc = AccType<T>;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      Acc acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        acc +=
            static_cast<Acc>(a[i * a_row + p * a_col]) * static_cast<Acc>(b[p * b_row + j * b_col]);
      }
      c[i * n + j] = acc;
    }
  }
}

absl::Status CheckSameType(absl::string_view op, const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, " inputs have element types ",
                                                 DataTypeName(a.dtype()), " and ",
                                                 DataTypeName(b.dtype())));
}

absl::Status UnsupportedType(absl::string_view op, DataType type) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, " does not support element type ", DataTypeName(type)));
}

}  // namespace

absl::Status MatMul(const Tensor& a, const Tensor& b, Tensor& out) {
  LS_RETURN_IF_ERROR(CheckSameType("MatMul", a, b));
  LS_ASSIGN_OR_RETURN(const MatMulDims dims, MatMulShapes(a.shape(), b.shape()));
  const bool supported = DispatchNumeric(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = AccType<T>;
    out.Resize(a.dtype(), dims.output);
    if (out.NumElements() == 0) return;
    const int64_t m = dims.m, k = dims.k, n = dims.n;
    std::vector<Acc> product(static_cast<size_t>(m * n));
    const Shape* batches[] = {&dims.a_batch, &dims.b_batch};
    const BroadcastLayout layout = MakeBroadcastLayout(dims.batch, batches);
    const int64_t row = layout.dims.back();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.mutable_data<T>();
    ForEachRow(layout, [&](int64_t out_offset, const int64_t* in) {
      for (int64_t r = 0; r < row; ++r) {
        const T* ma = pa + (in[0] + r * layout.strides[0].back()) * m * k;
        const T* mb = pb + (in[1] + r * layout.strides[1].back()) * k * n;
        MatrixProduct<T>(ma, k, 1, mb, n, 1, m, k, n, product.data());
        T* mo = po + (out_offset + r) * m * n;
        for (int64_t i = 0; i < m * n; ++i) mo[i] = static_cast<T>(product[i]);
      }
    });
  });
  if (!supported) return UnsupportedType("MatMul", a.dtype());
  return absl::OkStatus();
}

absl::Status Gemm(const Tensor& a, const Tensor& b, const Tensor* c, const GemmAttrs& attrs,
                  Tensor& out) {
  LS_RETURN_IF_ERROR(CheckSameType("Gemm", a, b));
  if (c != nullptr) LS_RETURN_IF_ERROR(CheckSameType("Gemm", a, *c));
  LS_ASSIGN_OR_RETURN(const GemmDims dims, GemmShapes(a.shape(), b.shape(),
                                                      c != nullptr ? &c->shape() : nullptr, attrs));
  const bool supported = DispatchNumeric(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = AccType<T>;
    const int64_t m = dims.m, k = dims.k, n = dims.n;
    const Shape out_shape{m, n};
    out.Resize(a.dtype(), out_shape);
    if (out.NumElements() == 0) return;
    // A is stored [m, k], or [k, m] when transposed; B is [k, n], or [n, k].
    const int64_t a_row = attrs.trans_a ? 1 : k, a_col = attrs.trans_a ? m : 1;
    const int64_t b_row = attrs.trans_b ? 1 : n, b_col = attrs.trans_b ? k : 1;
    std::vector<Acc> product(static_cast<size_t>(m * n));
    MatrixProduct<T>(a.data<T>(), a_row, a_col, b.data<T>(), b_row, b_col, m, k, n, product.data());
    T* po = out.mutable_data<T>();
    std::vector<T> c_full;
    if (c != nullptr) {
      c_full.resize(static_cast<size_t>(m * n));
      BroadcastCopy(c->raw_data(), c->shape(), c_full.data(), out_shape, sizeof(T));
    }
    for (int64_t i = 0; i < m * n; ++i) {
      if constexpr (std::is_integral_v<T>) {
        if (attrs.alpha == 1.0f && (c == nullptr || attrs.beta == 1.0f)) {
          Acc v = product[i];
          if (c != nullptr) v += static_cast<Acc>(c_full[i]);
          po[i] = static_cast<T>(v);
          continue;
        }
        // Converting back from the wrapped accumulator keeps the sign of the true product.
        double v =
            static_cast<double>(attrs.alpha) * static_cast<double>(static_cast<T>(product[i]));
        if (c != nullptr) v += static_cast<double>(attrs.beta) * static_cast<double>(c_full[i]);
        po[i] = static_cast<T>(v);
      } else {
        double v = static_cast<double>(attrs.alpha) * product[i];
        if (c != nullptr) v += static_cast<double>(attrs.beta) * static_cast<double>(c_full[i]);
        po[i] = static_cast<T>(v);
      }
    }
  });
  if (!supported) return UnsupportedType("Gemm", a.dtype());
  return absl::OkStatus();
}

}  // namespace loopserve::engine::reference
