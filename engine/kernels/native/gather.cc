// Gather: picks slices along an axis by int32/int64 indices (negative ones count from the end).

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

class GatherKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", 0));
    return std::unique_ptr<Kernel>(new GatherKernel(axis));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    if (indices.dtype() == DataType::kInt64) return Gather<int64_t>(ctx, data, indices);
    if (indices.dtype() == DataType::kInt32) return Gather<int32_t>(ctx, data, indices);
    return absl::InvalidArgumentError(
        absl::StrCat("indices must be int32 or int64, got ", DataTypeName(indices.dtype())));
  }

 private:
  explicit GatherKernel(int64_t axis) : axis_(axis) {}

  template <typename I>
  absl::Status Gather(KernelContext& ctx, const Tensor& data, const Tensor& indices) const {
    const int rank = data.rank();
    if (rank == 0) return absl::InvalidArgumentError("cannot gather from a scalar");
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, rank));
    const int64_t axis_dim = data.dim(axis);
    const int64_t n = indices.NumElements();
    const I* idx = indices.data<I>();
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = idx[j];
      if (k < -axis_dim || k >= axis_dim) {
        return absl::InvalidArgumentError(
            absl::StrCat("index ", k, " is out of range for axis ", axis, " of size ", axis_dim));
      }
    }
    Shape out_shape;
    Shape::Dims& dims = out_shape.mutable_dims();
    for (int d = 0; d < axis; ++d) dims.push_back(data.dim(d));
    for (int64_t d : indices.shape().dims()) dims.push_back(d);
    for (int d = axis + 1; d < rank; ++d) dims.push_back(data.dim(d));
    Tensor* y = ctx.output(0, data.dtype(), out_shape);
    const int64_t outer = data.shape().NumElements(0, axis);
    const int64_t inner = data.shape().NumElements(axis + 1, rank);
    DispatchBySize(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = data.data<T>();
      T* out = y->mutable_data<T>();
      for (int64_t o = 0; o < outer; ++o) {
        const T* src_row = in + o * axis_dim * inner;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = idx[j] < 0 ? idx[j] + axis_dim : idx[j];
          const T* src = src_row + k * inner;
          if (inner == 1) {
            *out++ = *src;
          } else {
            std::memcpy(out, src, static_cast<size_t>(inner) * sizeof(T));
            out += inner;
          }
        }
      }
    });
    return absl::OkStatus();
  }

  int64_t axis_;
};

}  // namespace

void RegisterGatherKernels(KernelRegistry& registry) {
  registry.Register("Gather", FactoryOf<GatherKernel>());
}

}  // namespace loopserve::engine::native
