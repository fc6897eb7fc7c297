// Ops producing or consuming index sets: OneHot and NonZero.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

// Reads element 0 of any numeric tensor as double.
double ScalarAsDouble(const Tensor& t) {
  double v = 0;
  DispatchNumeric(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(t.data<T>()[0]);
  });
  return v;
}

// OneHot(indices, depth, values; axis): a new axis of size depth holding values[1] where it equals
// the index (negative indices count from depth) and values[0] elsewhere.
class OneHotKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 3, 3));
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", -1));
    return std::unique_ptr<Kernel>(new OneHotKernel(axis));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& indices = ctx.input(0);
    const Tensor& depth_t = ctx.input(1);
    const Tensor& values = ctx.input(2);
    if (depth_t.NumElements() != 1 ||
        !(IsInteger(depth_t.dtype()) || IsFloatingPoint(depth_t.dtype()))) {
      return absl::InvalidArgumentError("depth must be a numeric scalar");
    }
    if (values.NumElements() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("values must hold [off, on], got shape ", values.shape().ToString()));
    }
    const double depth_d = ScalarAsDouble(depth_t);
    if (!(depth_d >= 1) || depth_d > static_cast<double>(kMaxElements)) {
      return absl::InvalidArgumentError(absl::StrCat("depth must be positive, got ", depth_d));
    }
    const int64_t depth = static_cast<int64_t>(depth_d);
    const int rank = indices.rank() + 1;
    if (axis_ < -rank || axis_ >= rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("axis ", axis_, " is out of range for output rank ", rank));
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    Shape::Dims dims(indices.shape().dims().begin(), indices.shape().dims().end());
    dims.insert(dims.begin() + axis, depth);
    LS_ASSIGN_OR_RETURN(Shape out_shape, ValidateDims(dims, "output"));
    const int64_t outer = indices.shape().NumElements(0, axis);
    const int64_t inner = indices.shape().NumElements(axis, indices.rank());
    Tensor* y = ctx.output(0, values.dtype(), out_shape);
    bool index_ok = true;
    const bool ok = DispatchBySize(values.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T off = values.data<T>()[0];
      const T on = values.data<T>()[1];
      T* out = y->mutable_data<T>();
      std::fill_n(out, out_shape.NumElements(), off);
      index_ok = DispatchNumeric(indices.dtype(), [&](auto itag) {
        using I = typename decltype(itag)::type;
        const I* idx = indices.data<I>();
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t i = 0; i < inner; ++i) {
            int64_t k = static_cast<int64_t>(idx[o * inner + i]);
            if (k < 0) k += depth;
            if (k < 0 || k >= depth) continue;
            out[(o * depth + k) * inner + i] = on;
          }
        }
      });
    });
    if (!ok) return UnsupportedType("values", values.dtype());
    if (!index_ok) return UnsupportedType("indices", indices.dtype());
    return absl::OkStatus();
  }

 private:
  explicit OneHotKernel(int64_t axis) : axis_(axis) {}
  int64_t axis_;
};

// NonZero(X): the int64 coordinates [rank, count] of the non-zero elements, in row-major order.
class NonZeroKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    return std::unique_ptr<Kernel>(new NonZeroKernel());
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    const int64_t n = x.NumElements();
    const bool ok = DispatchNumericOrBool(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x.data<T>();
      int64_t count = 0;
      for (int64_t i = 0; i < n; ++i) count += in[i] != T{0} ? 1 : 0;
      // A scalar has rank 0 but counts as [1] (as numpy's nonzero on a 0-d array gives).
      const int out_rank = std::max(rank, 1);
      Tensor* y = ctx.output(0, DataType::kInt64, Shape{out_rank, count});
      int64_t* out = y->mutable_data<int64_t>();
      DimVector coord(out_rank, 0);
      int64_t j = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (in[i] != T{0}) {
          for (int d = 0; d < out_rank; ++d) out[d * count + j] = coord[d];
          ++j;
        }
        for (int d = rank - 1; d >= 0; --d) {
          if (++coord[d] < x.dim(d)) break;
          coord[d] = 0;
        }
      }
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterIndexKernels(KernelRegistry& registry) {
  registry.Register("OneHot", FactoryOf<OneHotKernel>(), 9);
  registry.Register("NonZero", FactoryOf<NonZeroKernel>(), 9);
}

}  // namespace loopserve::engine::native
