// Reference Softmax; see reference.h.

#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/reference/reference.h"
#include "engine/tensor/dtype.h"

namespace loopserve::engine::reference {
namespace {

absl::Status SoftmaxImpl(const Tensor& x, int64_t axis, bool coerce_2d, bool log, Tensor& out) {
  if (!IsFloatingPoint(x.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(log ? "LogSoftmax" : "Softmax",
                                                   " does not support element type ",
                                                   DataTypeName(x.dtype())));
  }
  LS_ASSIGN_OR_RETURN(const SoftmaxDims dims, SoftmaxShapes(x.shape(), axis, coerce_2d));
  DispatchNumeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      out.Resize(x.dtype(), x.shape());
      const T* in = x.data<T>();
      T* o = out.mutable_data<T>();
      const int64_t n = dims.axis_dim, inner = dims.inner;
      for (int64_t outer = 0; outer < dims.outer; ++outer) {
        for (int64_t i = 0; i < inner; ++i) {
          // Element j of this softmax vector is at base + j * inner.
          const int64_t base = outer * n * inner + i;
          double max = -INFINITY;
          for (int64_t j = 0; j < n; ++j)
            max = std::max(max, static_cast<double>(in[base + j * inner]));
          double sum = 0;
          for (int64_t j = 0; j < n; ++j) sum += std::exp(in[base + j * inner] - max);
          const double log_sum = std::log(sum);
          for (int64_t j = 0; j < n; ++j) {
            const double shifted = in[base + j * inner] - max;
            o[base + j * inner] = static_cast<T>(log ? shifted - log_sum : std::exp(shifted) / sum);
          }
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status Softmax(const Tensor& x, int64_t axis, bool coerce_2d, Tensor& out) {
  return SoftmaxImpl(x, axis, coerce_2d, /*log=*/false, out);
}

absl::Status LogSoftmax(const Tensor& x, int64_t axis, bool coerce_2d, Tensor& out) {
  return SoftmaxImpl(x, axis, coerce_2d, /*log=*/true, out);
}

}  // namespace loopserve::engine::reference
